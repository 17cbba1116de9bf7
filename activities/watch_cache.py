"""The worker's shared watch cache: one list+watch per kind and scope, indexed by PodCliqueSet replica.

Routine observation reads a replica from here instead of issuing four or five LISTs per round (issue 17). Every
worker keeps one, leader or not, so a standby's view is warm when it takes the watcher over (worker/watcher.py
subscribes to the same streams instead of opening its own).

What a read from here may be used for: anything that is not destructive. A snapshot read from the cache says so
(`ReplicaSnapshot.from_cache`), and the replica workflow never deletes on one: it looks again with a fresh read from
the apiserver first (workflows/replica.py, CACHED_OBSERVE_PATCH). Materialising, scale-in and the scaled release's
re-check read the apiserver themselves, as before.

Freshness is told by resourceVersions, never by clocks: per kind, the cache has handed on every change up to the
version its ListWatch reports (a LIST's own, then each watch event's and bookmark's). A nudge carries the versions of
the events it stands for, and a read waits (briefly) until the cache has reached them, else it is refused and the
caller reads the apiserver.

A kind's watch moves its version only with a change or a bookmark (about once a minute), so a kind nothing changed
in since a cache listed it stays at that LIST's version, below the version a later LIST gave another worker's cache.
A replica read on that other worker carries its versions on as a floor (workflows/nudges.py), and a read here asked
to reach them would wait them out and go to the apiserver, round after round: with two workers, half the routine
reads on the first one (bench scaleout). Such a read asks the apiserver for progress instead (`_probe`): one LIST of
the kind; where it holds exactly what the store holds, every change up to its version has been handed on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime

from activities.kubeapi import (
    JSON,
    PODCLIQUES,
    PODCLIQUESETS,
    PODGANGS,
    PODS,
    SCALINGGROUPS,
    Kube,
    KubeError,
    ListWatch,
    Resource,
    name_of,
    resource_version,
    slim,
)
from activities.metrics import PROGRESS_PROBES
from grove import names

log = logging.getLogger(__name__)

# Our objects and the Grove operator's: observe reports the latter (the one-controller rule, grove/controllers.py).
CACHED_SELECTOR = f"{names.LABEL_MANAGED_BY} in ({names.MANAGED_BY},{names.GROVE_OPERATOR_MANAGED_BY})"
REPLICA_KINDS = (PODCLIQUES, PODS, PODGANGS, SCALINGGROUPS)

# (kind, event type, object, relisted, listed_at): called on the ListWatch's thread, after the store has the change.
# listed_at: for an item of a LIST or a deletion it found, the LIST's resourceVersion; None for a watch event.
Subscriber = Callable[[Resource, str, JSON, bool, str | None], None]
ReplicaIndex = tuple[str, str, str]  # (namespace, PodCliqueSet name, replica index as labelled)


# How long a read waits for the watches before it asks the apiserver for progress (see the module's docstring).
PROBE_AFTER_SECONDS = 0.2


class NotFresh(Exception):
    """The cache cannot serve this read (not synced yet, or behind the versions asked for): read the apiserver."""


def _trimmed(obj: JSON) -> JSON:
    """What the cache keeps: the object without managedFields (a third of a pod's bytes, never read)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        obj = {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    return obj


def _key(obj: JSON) -> tuple[str, str]:
    """Where a store keeps an object: (namespace, name)."""
    return ((obj.get("metadata") or {}).get("namespace") or "", name_of(obj))


def _older(obj: JSON, than: JSON) -> bool:
    """Whether `obj` is an older version of the same object than `than` (resourceVersions compare as integers)."""
    mine, theirs = resource_version(obj), resource_version(than)
    return (mine is not None and theirs is not None and mine < theirs
            and (obj.get("metadata") or {}).get("uid") == (than.get("metadata") or {}).get("uid"))


class _Store:
    """One kind's objects by (namespace, name), and by replica; guarded by the cache's lock."""

    def __init__(self, resource: Resource, indexed: bool, selector: str | None) -> None:
        self.resource = resource
        self.indexed = indexed
        self.selector = selector  # the label selector its ListWatch lists and watches with
        self.proven: int | None = None  # the version a probe showed the store complete up to (WatchCache._probe)
        self.probing = threading.Lock()  # one probe of a kind at a time; the readers queued behind it reuse it
        self.probed_at = 0.0  # (monotonic) when the last probe began
        self.changed_at = 0.0  # (monotonic) when the watch last handed on a change
        self.objects: dict[tuple[str, str], JSON] = {}
        self.by_replica: dict[ReplicaIndex, set[str]] = defaultdict(set)
        self.watch: ListWatch | None = None
        self.synced = threading.Event()

    @staticmethod
    def _index(obj: JSON) -> ReplicaIndex | None:
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        pcs, replica = labels.get(names.LABEL_PART_OF), labels.get(names.LABEL_PCS_REPLICA_INDEX)
        if not pcs or replica is None:
            return None
        return (meta.get("namespace") or "", str(pcs), str(replica))

    def put(self, obj: JSON) -> None:
        key = _key(obj)
        held = self.objects.get(key)
        if held is not None and _older(obj, held):  # a write of this process's is newer (WatchCache.wrote)
            return
        self.drop(key)
        self.objects[key] = _trimmed(obj)
        index = self._index(obj) if self.indexed else None
        if index is not None:
            self.by_replica[index].add(key[1])

    def drop(self, key: tuple[str, str]) -> None:
        old = self.objects.pop(key, None)
        index = self._index(old) if old is not None and self.indexed else None
        if index is not None:
            names_ = self.by_replica.get(index)
            if names_ is not None:
                names_.discard(key[1])
                if not names_:
                    del self.by_replica[index]

    def version(self) -> int | None:
        raw = self.watch.resource_version if self.watch is not None else None
        if raw is None or not raw.isdigit():
            return None
        return max(int(raw), self.proven or 0)

    def held_versions(self) -> dict[tuple[str, str], str]:
        return {key: str((obj.get("metadata") or {}).get("resourceVersion", "")) for key, obj in self.objects.items()}


class WatchCache:
    """PodCliqueSets (all) and the replica kinds (ours and the Grove operator's) of one scope, kept by watches."""

    def __init__(self, kube: Kube, namespace: str | None, *, resync_seconds: float = 1800.0,
                 watch_timeout_seconds: int = 300) -> None:
        self.kube = kube
        self.namespace = namespace or None
        self.resync_seconds = resync_seconds
        self.watch_timeout_seconds = watch_timeout_seconds
        self._lock = threading.Condition()
        self._stores = {r.kind: _Store(r, indexed=r is not PODCLIQUESETS,
                                       selector=None if r is PODCLIQUESETS else CACHED_SELECTOR)
                        for r in (PODCLIQUESETS, *REPLICA_KINDS)}
        self._subscribers: list[Subscriber] = []
        self._on_first_sync: list[Callable[[], None]] = []
        self._started = False

    # --- lifecycle ---------------------------------------------------------------------------------------------------
    def subscribe(self, subscriber: Subscriber) -> None:
        """Hear every change, after the store has it. Subscribe before start() to hear the first lists too."""
        self._subscribers.append(subscriber)

    def when_synced(self, callback: Callable[[], None]) -> None:
        """Call `callback` once, when every kind has been listed for the first time (at once if that is done). It runs
        on the thread of the last kind's list, after every subscriber has heard every item of every first list."""
        with self._lock:
            if not self.synced:
                self._on_first_sync.append(callback)
                return
        callback()

    def start(self, pcs_sync_timeout: float = 60.0) -> WatchCache:
        """Start the watches: PodCliqueSets first, so that an object of a replica is never heard of before its
        PodCliqueSet (subscribers map pods to workflows through the PodCliqueSet's UID)."""
        if self._started:
            return self
        self._started = True
        pcs_store = self._stores[PODCLIQUESETS.kind]
        self._start(pcs_store)
        if not pcs_store.synced.wait(pcs_sync_timeout):
            log.warning("watch cache: PodCliqueSets not listed within %.0fs; following the rest anyway",
                        pcs_sync_timeout)
        for resource in REPLICA_KINDS:
            self._start(self._stores[resource.kind])
        return self

    def stop(self) -> None:
        for store in self._stores.values():
            if store.watch is not None:
                store.watch.stop()

    def _start(self, store: _Store) -> None:
        made: list[ListWatch] = []

        def on_event(kind: str, obj: JSON, relisted: bool) -> None:
            with self._lock:
                if kind == "DELETED":
                    store.drop(_key(obj))
                else:
                    store.put(obj)
                store.changed_at = time.monotonic()
            for subscriber in self._subscribers:
                subscriber(store.resource, kind, obj, relisted, made[0].listed_at)

        def on_synced(_items: list[JSON]) -> None:
            with self._lock:
                store.synced.set()
                self._lock.notify_all()
                first_sync, self._on_first_sync = (self._on_first_sync, []) if self.synced else ([], self._on_first_sync)
            for callback in first_sync:
                callback()

        def on_error(error: Exception, delay: float) -> None:
            if isinstance(error, KubeError):
                log.warning("watch cache %s: %s; retrying in %.0fs", store.resource.plural, error, delay)
            else:  # a watch thread must never die silently
                log.error("watch cache %s failed; retrying in %.0fs", store.resource.plural, delay, exc_info=error)

        watch = ListWatch(self.kube, store.resource, self.namespace, on_event, label_selector=store.selector,
                          on_synced=on_synced, on_error=on_error, keep=slim,
                          resync_seconds=self.resync_seconds, watch_timeout_seconds=self.watch_timeout_seconds)
        made.append(watch)
        store.watch = watch
        watch.start(name=f"cache-{store.resource.plural}")

    def wrote(self, resource: Resource, obj: JSON) -> None:
        """An object this process has just written, as kube-apiserver answered the write: kept in place of the one
        the store holds, if that is an older version of it, so that a read right after sees the write before the
        watch delivers it (a round read the gates its previous round had removed still on, under load, and removed
        them again). The kind's version does not move: only what the watch has handed on counts for freshness. An
        object the store does not hold is left alone: it may have been deleted since the write."""
        store = self._stores.get(resource.kind)
        if store is None:
            return
        key = _key(obj)
        with self._lock:
            held = store.objects.get(key)
            if held is not None and _older(held, obj):
                store.put(obj)

    # --- reads -------------------------------------------------------------------------------------------------------
    @property
    def synced(self) -> bool:
        return all(store.synced.is_set() for store in self._stores.values())

    def versions(self) -> dict[str, int]:
        """kind -> the resourceVersion the cache has handed on every change up to."""
        found = {}
        for kind, store in self._stores.items():
            version = store.version()
            if version is not None:
                found[kind] = version
        return found

    def _behind(self, at_least: dict[str, int]) -> dict[str, int]:
        have = self.versions()
        return {kind: version for kind, version in at_least.items()
                if kind in self._stores and have.get(kind, -1) < version}

    def get(self, kind: str, namespace: str, name: str) -> JSON | None:
        """The cached object of a cached kind (None: the cache has none by that name); NotFresh before the kind's
        first list. No version is waited for: a caller that must see its own writes checks resourceVersions."""
        store = self._stores[kind]
        with self._lock:
            if not store.synced.is_set():
                raise NotFresh(f"{store.resource.plural} not synced yet")
            return store.objects.get((namespace, name))

    def replica(self, namespace: str, pcs: str, replica: int, *, at_least: dict[str, int] | None = None,
                wait_seconds: float = 2.0) -> tuple[JSON | None, dict[str, list[JSON]], dict[str, int], datetime]:
        """(the PodCliqueSet, kind -> the replica's objects, the versions read up to, when the read began) once the
        cache is synced and has reached `at_least`, waiting up to `wait_seconds` for that; else NotFresh."""
        began = time.monotonic()
        deadline, probe_at = began + wait_seconds, began + PROBE_AFTER_SECONDS
        behind: dict[str, int] = {}
        while True:
            with self._lock:
                while not self.synced or self._behind(at_least or {}):
                    now = time.monotonic()
                    if now >= deadline:
                        behind = self._behind(at_least or {})
                        raise NotFresh("not synced yet" if not self.synced else
                                       "behind " + ", ".join(f"{k} {self.versions().get(k)} < {v}"
                                                             for k, v in sorted(behind.items())))
                    if self.synced and now >= probe_at:
                        behind = self._behind(at_least or {})
                        break
                    self._lock.wait(min(deadline - now, 0.05))  # events do not notify (one per event would cost); poll
                else:
                    # Versions first, then the objects, under the lock: nothing older than these versions is missing.
                    versions = self.versions()
                    read_from = datetime.now(UTC)
                    pcs_obj = self._stores[PODCLIQUESETS.kind].objects.get((namespace, pcs))
                    index = (namespace, pcs, str(replica))
                    items = {}
                    for resource in REPLICA_KINDS:
                        store = self._stores[resource.kind]
                        items[resource.kind] = [store.objects[(namespace, n)]
                                                for n in sorted(store.by_replica.get(index, ()))]
                    return pcs_obj, items, versions, read_from
            probe_at = deadline  # once per read
            self._probe(behind, began)

    def _probe(self, behind: dict[str, int], began: float) -> None:
        """For each kind still below the version asked for: one LIST, as its watch lists; where it returns exactly
        the objects the store holds, at the same resourceVersions, no change up to the LIST's version is still to
        come (each would have changed an object's version, added one or removed one), and the store's version moves
        up to the one asked for. Otherwise the watch has changes on the way: the read goes on waiting for them.
        Not for a kind whose watch handed on a change in the last PROBE_AFTER_SECONDS (it is moving, and a LIST
        of pods can be large), nor where a probe began since this read did (its answer stands for this one too)."""
        for kind, wanted in sorted(behind.items()):
            store = self._stores[kind]
            with store.probing:
                with self._lock:
                    now = time.monotonic()
                    if ((store.version() or -1) >= wanted or store.probed_at >= began
                            or now - store.changed_at < PROBE_AFTER_SECONDS):
                        continue
                    store.probed_at = now
                try:
                    listing = self.kube.list(store.resource, self.namespace, label_selector=store.selector)
                except KubeError as exc:
                    log.info("watch cache %s: progress not read (%s)", store.resource.plural, exc)
                    continue
                version = str((listing.get("metadata") or {}).get("resourceVersion", ""))
                listed = {((obj["metadata"].get("namespace") or ""), obj["metadata"]["name"]):
                          str(obj["metadata"].get("resourceVersion", "")) for obj in listing.get("items") or []}
                with self._lock:
                    if not version.isdigit() or store.held_versions() != listed:
                        continue
                    # Only as far as asked (the LIST proves up to its own version, which is at least that): a cache
                    # that moved to the LIST's version would be ahead of the other worker's, and a read there asked
                    # to reach it would probe in turn, and so on, each time the store's version moved on.
                    store.proven = max(store.proven or 0, min(wanted, int(version)))
                    self._lock.notify_all()
                PROGRESS_PROBES.labels(store.resource.plural).inc()

    def podcliqueset(self, namespace: str, pcs: str) -> tuple[JSON | None, list[JSON], list[JSON]]:
        """(the PodCliqueSet, its PodCliques, its PCSGs) as cached, every replica's; NotFresh before the first lists.
        A scan of the replica index: cheap beside a LIST, and the caller (the PCS status writer) reads a PCS at most
        a few times a second."""
        pcs_obj, found = self.podcliqueset_objects(namespace, pcs, (PODCLIQUES, SCALINGGROUPS))
        return pcs_obj, found[PODCLIQUES.kind], found[SCALINGGROUPS.kind]

    def podcliqueset_objects(self, namespace: str, pcs: str, kinds: tuple[Resource, ...]
                             ) -> tuple[JSON | None, dict[str, list[JSON]]]:
        """(the PodCliqueSet, kind -> its objects of `kinds`, every replica's, ours and the Grove operator's) as
        cached; NotFresh before the first lists. A scan of the replica index, like podcliqueset()."""
        with self._lock:
            if not self.synced:
                raise NotFresh("not synced yet")
            found: dict[str, list[JSON]] = {}
            for resource in kinds:
                store = self._stores[resource.kind]
                found[resource.kind] = [store.objects[(namespace, name)]
                                        for (ns, owner, _), members in store.by_replica.items()
                                        if ns == namespace and owner == pcs for name in sorted(members)]
            pcs_obj = self._stores[PODCLIQUESETS.kind].objects.get((namespace, pcs))
        return pcs_obj, found

    def podcliqueset_keys(self) -> list[tuple[str, str]]:
        """(namespace, name) of every cached PodCliqueSet."""
        with self._lock:
            return sorted(self._stores[PODCLIQUESETS.kind].objects)
