"""The watcher: Kubernetes watch events in, coalesced nudge signals to replica workflows out.

Workflows never poll. Each object kind we care about is followed informer-style (list, then watch from the list's
resourceVersion, relist on expiry and every `resync` period). An event only matters when a field the workflows
act on changed (a pod's readiness, binding, gate or deletion; a PCLQ's existence; a PCS's spec), so each object
keeps a small fingerprint and our own status writes, which change none of those fields, wake nobody.

Nudges are coalesced per replica: while a signal to a workflow is in flight, further events for it collapse into
one follow-up signal.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from activities.kubeapi import (
    JSON,
    PODCLIQUES,
    PODCLIQUESETS,
    PODS,
    SCALINGGROUPS,
    Kube,
    KubeError,
    ListWatch,
    Resource,
    resource_version,
)
from activities.metrics import NUDGES, WATCH_EVENTS
from grove import names
from grove.models.podcliqueset import wanted_replicas
from workflows.contract import NUDGE_SIGNAL, PCS_CHANGED_SIGNAL, ReplicaKey, reconciler_workflow_id
from workflows.messages import Nudge
from workflows.nudge_versions import sending

log = logging.getLogger(__name__)

MANAGED_SELECTOR = names.managed_selector()

Fingerprint = tuple[Any, ...]
ObjectKey = tuple[str, str]  # (namespace, name)


def pcs_fingerprint(obj: JSON) -> Fingerprint:
    meta = obj.get("metadata", {})
    # Finalizers: the Grove operator claiming or releasing a PodCliqueSet (grove/controllers.py) is a change to act on.
    return (meta.get("uid"), meta.get("generation"), bool(meta.get("deletionTimestamp")),
            tuple(sorted(meta.get("finalizers") or [])))


def pclq_fingerprint(obj: JSON) -> Fingerprint:
    meta = obj.get("metadata", {})
    return (meta.get("uid"), bool(meta.get("deletionTimestamp")), (obj.get("spec") or {}).get("replicas"))


def pcsg_fingerprint(obj: JSON) -> Fingerprint:
    """A PCSG wakes its replica when it appears, goes, or is scaled (an HPA or `kubectl scale` wrote replicas)."""
    meta = obj.get("metadata", {})
    return (meta.get("uid"), bool(meta.get("deletionTimestamp")), (obj.get("spec") or {}).get("replicas"))


def pod_fingerprint(obj: JSON) -> Fingerprint:
    meta, spec, status = obj.get("metadata", {}), obj.get("spec") or {}, obj.get("status") or {}
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    gated = any(g.get("name") == names.SCHEDULING_GATE for g in spec.get("schedulingGates") or [])
    return (
        meta.get("uid"),
        bool(meta.get("deletionTimestamp")),
        spec.get("nodeName"),
        gated,
        conditions.get("PodScheduled"),
        conditions.get("Ready"),
        status.get("phase"),
    )


@dataclass
class _Feed:
    resource: Resource
    label_selector: str | None
    fingerprint: Callable[[JSON], Fingerprint]
    # What the watcher knows, beside the ListWatch's own map (uid -> resourceVersion, slim object). Kept on purpose,
    # not a duplicate to remove: (1) relevance needs the previous *fingerprint*, which the ListWatch neither keeps
    # nor hands to its handler; (2) pods and PodCliques find their PCS by (namespace, name), the ListWatch keys by
    # UID; (3) this map lives on the event loop while the ListWatch's is written by its thread, so reading that one
    # here would race; (4) it outlives a run: each leadership term starts new ListWatches, and only this map lets
    # `_on_sync` see what was deleted while this worker was not the leader. The ListWatch keeps `_slim` objects too
    # (its `keep`), so that a DELETED it finds only by relisting still carries the labels and replicas used here.
    known: dict[ObjectKey, tuple[Fingerprint, JSON]] = field(default_factory=dict)
    synced: asyncio.Event = field(default_factory=asyncio.Event)


Versions = dict[str, int]  # kind -> resourceVersion of the newest watch event a nudge stands for

# A signal's deadline. Without one a call sent into a connection whose packets are being dropped was seen to hang for
# three minutes after the partition had ended (fault smoke, a worker cut off from Temporal for 9 s), holding that
# replica's nudges back the whole time; with one it fails, is kept, and is sent again.
RPC_TIMEOUT = timedelta(seconds=10)


def _merged(first: Versions | None, second: Versions | None) -> Versions | None:
    """One nudge standing for both: None (no versions: judged by the clock) if either has none."""
    if first is None or second is None:
        return None
    return {kind: max(first.get(kind, 0), second.get(kind, 0)) for kind in first.keys() | second.keys()}


class Nudger:
    """Sends nudge signals, at most one in flight per workflow, coalescing the rest. A nudge that fails (Temporal
    unreachable for longer than the client retries a call) is kept and sent again: dropped, it would leave the
    workflow unaware of the change until its safety resync hours later, since the watcher has already moved on.

    Each nudge carries the resourceVersions of the events it stands for (a header, workflows/nudge_versions.py), so
    the workflow tells whether its last read saw them without comparing this process's clock with another's."""

    def __init__(self, client: Client, *, concurrency: int = 64, coalesce_seconds: float = 0.005,
                 retry_seconds: float = 2.0, rpc_timeout: timedelta = RPC_TIMEOUT,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.client = client
        self.rpc_timeout = rpc_timeout
        self.coalesce_seconds = coalesce_seconds
        self.retry_seconds = retry_seconds
        self.clock = clock
        self._semaphore = asyncio.Semaphore(concurrency)
        self._pending: dict[str, Versions | None] = {}
        self._in_flight: set[str] = set()
        self._wake = asyncio.Event()
        self.on_missing: Callable[[str], None] = lambda workflow_id: None
        self.failing_since: float | None = None  # monotonic: the first failed send since the last one that worked

    def request(self, workflow_id: str, versions: Versions | None = None) -> None:
        """Nudge `workflow_id` for watch events at `versions` (None: an event without one, judged by the clock)."""
        if workflow_id in self._pending:
            versions = _merged(self._pending[workflow_id], versions)
        self._pending[workflow_id] = versions
        self._wake.set()

    async def run(self) -> None:
        tasks: set[asyncio.Task[None]] = set()
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self.coalesce_seconds:
                await asyncio.sleep(self.coalesce_seconds)
            ready = [workflow_id for workflow_id in self._pending if workflow_id not in self._in_flight]
            for workflow_id in ready:
                self._in_flight.add(workflow_id)
                task = asyncio.create_task(self._send(workflow_id, self._pending.pop(workflow_id)))
                tasks.add(task)
                task.add_done_callback(tasks.discard)

    async def _send(self, workflow_id: str, versions: Versions | None) -> None:
        try:
            try:
                async with self._semaphore:
                    # Stamped at each attempt: a round that began after this moment has seen the change.
                    with sending(versions):
                        await self.client.get_workflow_handle(workflow_id).signal(
                            NUDGE_SIGNAL, Nudge(sent_at=self.clock()), rpc_timeout=self.rpc_timeout)
                NUDGES.labels("sent").inc()
                self.failing_since = None
            except asyncio.CancelledError:  # this term ends (the Lease lost or handed back): a later one sends it
                self.request(workflow_id, versions)
                raise
            except RPCError as exc:
                if exc.status == RPCStatusCode.NOT_FOUND:
                    NUDGES.labels("workflow-missing").inc()
                    self.failing_since = None
                    self.on_missing(workflow_id)
                    return
                NUDGES.labels("failed").inc()
                if self.failing_since is None:
                    self.failing_since = time.monotonic()
                log.warning("nudge %s failed, retrying in %.0fs: %s", workflow_id, self.retry_seconds, exc)
                self.request(workflow_id, versions)  # still in flight meanwhile: new events coalesce into this retry
                await asyncio.sleep(self.retry_seconds)
        finally:
            self._in_flight.discard(workflow_id)
            if workflow_id in self._pending:
                self._wake.set()


class Watcher:
    """Follows PCS, PCSG, PCLQ and pod changes; nudges the affected replica workflows and the reconciler."""

    def __init__(
        self,
        kube: Kube,
        client: Client,
        *,
        namespace: str | None = None,
        resync_seconds: float = 1800.0,
        watch_timeout_seconds: int = 1800,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.kube = kube
        self.client = client
        self.namespace = namespace or None
        self.resync_seconds = resync_seconds
        self.watch_timeout_seconds = watch_timeout_seconds
        self.nudger = Nudger(client, clock=clock)
        self.nudger.on_missing = self._workflow_missing
        self.pcs_feed = _Feed(PODCLIQUESETS, None, pcs_fingerprint)
        self.pclq_feed = _Feed(PODCLIQUES, MANAGED_SELECTOR, pclq_fingerprint)
        self.pod_feed = _Feed(PODS, MANAGED_SELECTOR, pod_fingerprint)
        self.pcsg_feed = _Feed(SCALINGGROUPS, MANAGED_SELECTOR, pcsg_fingerprint)
        self._pending_pcs: set[ObjectKey] = set()
        self._reconciler_wake = asyncio.Event()

    # --- lifecycle ------------------------------------------------------------------------------------------
    async def run(self) -> None:
        """Run until cancelled. Runs again after that: the elector starts it each time this worker gains the lease
        (after losing it, e.g. to a kube-apiserver outage longer than two thirds of the lease)."""
        loop = asyncio.get_running_loop()
        self.nudger.failing_since = None  # a new term is judged on its own sends
        # A fresh stop event per run: threads of an earlier run (maybe still blocked in a watch) keep theirs, set,
        # and end; these start unstopped. Sharing one left set by the last run would end every new thread at once.
        watches: list[ListWatch] = []
        tasks = [asyncio.create_task(self.nudger.run()), asyncio.create_task(self._notify_reconciler())]
        try:
            for feed in (self.pcs_feed, self.pclq_feed, self.pod_feed, self.pcsg_feed):
                feed.synced = asyncio.Event()
                watches.append(self._list_watch(feed, loop).start(name=f"watch-{feed.resource.plural}"))
                if feed is self.pcs_feed:  # pods and PCLQs are mapped to workflows through the PCS UID
                    await feed.synced.wait()
            await asyncio.Event().wait()
        finally:
            # Each run has its own ListWatches: threads of an earlier run (maybe still blocked in a watch) end on
            # their own stop, and these start unstopped.
            for watch in watches:
                watch.stop()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _list_watch(self, feed: _Feed, loop: asyncio.AbstractEventLoop) -> ListWatch:
        """Follow one resource from a thread; everything it sees is handled on the event loop."""

        def retrying(error: Exception, delay: float) -> None:
            if isinstance(error, KubeError):
                log.warning("watch %s: %s; retrying in %.0fs", feed.resource.plural, error, delay)
            else:  # a watcher thread must never die silently
                log.error("watch %s failed; retrying in %.0fs", feed.resource.plural, delay, exc_info=error)

        # Read in the ListWatch's own thread, at the call: whether the event is an item of a LIST.
        made: list[ListWatch] = []
        watch = ListWatch(
            self.kube, feed.resource, self.namespace,
            lambda kind, obj, _relisted: loop.call_soon_threadsafe(self._on_event, feed, kind, obj,
                                                                   made[0].listing),
            label_selector=feed.label_selector,
            on_synced=lambda items: loop.call_soon_threadsafe(self._on_sync, feed, items),
            on_error=retrying, keep=_slim, resync_seconds=self.resync_seconds,
            watch_timeout_seconds=self.watch_timeout_seconds,
        )
        made.append(watch)
        return watch

    def unfit(self, after_seconds: float = 5.0) -> str | None:
        """Why this watcher should not lead: its nudges have been failing (each after the client's ~11 s of
        retries) for `after_seconds` more. The elector then hands the Lease to a worker that may reach Temporal."""
        since = self.nudger.failing_since
        if since is None or time.monotonic() - since < after_seconds:
            return None
        return f"no nudge has reached Temporal for {time.monotonic() - since:.0f}s (plus the client's retries)"

    # --- event handling (event loop thread) -----------------------------------------------------------------
    def _on_sync(self, feed: _Feed, items: list[JSON]) -> None:
        """After a list: what this process knew but the list no longer has went away while nobody watched (a new
        run of the watcher lists afresh, so its ListWatch cannot know that)."""
        listed = {_key(obj) for obj in items}
        for key in list(feed.known):
            if key not in listed:
                _, last = feed.known[key]
                self._on_event(feed, "DELETED", last)  # `_slim` keeps no resourceVersion: judged by the clock
        feed.synced.set()

    def _on_event(self, feed: _Feed, kind: str | None, obj: JSON, listed: bool = False) -> None:
        key = _key(obj)
        previous = feed.known.get(key)
        if kind == "DELETED":
            feed.known.pop(key, None)
            relevant = previous is not None
        else:
            fingerprint = feed.fingerprint(obj)
            feed.known[key] = (fingerprint, _slim(obj))
            relevant = previous is None or previous[0] != fingerprint
        WATCH_EVENTS.labels(feed.resource.plural, str(relevant).lower()).inc()
        if not relevant:
            return
        # An item of a (re)list is relevant against what this process remembered from an earlier term, not because
        # it just changed: a change made and undone meanwhile (scaled 2 -> 4 -> 2 while another worker led) leaves
        # only old resourceVersions behind, which the workflow's last read already covers. Such nudges go by the
        # clock, as before versions existed (fault run seed 42, round 3: surplus pods left for minutes).
        versions = None if listed else _versions_of(feed.resource, obj)
        if feed is self.pcs_feed:
            self._pcs_changed(key, obj, previous[1] if previous else None, versions)
        else:
            for replica_key in self._replica_keys(obj):
                self.nudger.request(replica_key.workflow_id, versions)

    def _pcs_changed(self, key: ObjectKey, obj: JSON, previous: JSON | None, versions: Versions | None) -> None:
        self._pending_pcs.add(key)
        self._reconciler_wake.set()
        # Every replica that may exist before or after the change re-reads its spec (scale in/out, deletion).
        for version in (previous, obj):
            if version is None:
                continue
            uid = version.get("metadata", {}).get("uid")
            replicas = wanted_replicas(version) or 0
            for index in range(replicas):
                self.nudger.request(ReplicaKey(key[0], key[1], uid, index).workflow_id, versions)

    def _replica_keys(self, obj: JSON) -> Iterable[ReplicaKey]:
        meta = obj.get("metadata", {})
        labels = meta.get("labels") or {}
        pcs, index = labels.get(names.LABEL_PART_OF), labels.get(names.LABEL_PCS_REPLICA_INDEX)
        if not pcs or index is None or not str(index).isdigit():
            return ()
        known = self.pcs_feed.known.get((meta.get("namespace", ""), pcs))
        if known is None:
            return ()
        return (ReplicaKey(meta.get("namespace", ""), pcs, known[1]["metadata"]["uid"], int(index)),)

    def _workflow_missing(self, workflow_id: str) -> None:
        """A nudge found no running workflow: let the reconciler decide whether one should exist."""
        parts = workflow_id.split("/")
        if len(parts) == 5:
            self._pending_pcs.add((parts[1], parts[2]))
            self._reconciler_wake.set()

    async def _notify_reconciler(self) -> None:
        handle = self.client.get_workflow_handle(reconciler_workflow_id(self.namespace))
        while True:
            await self._reconciler_wake.wait()
            self._reconciler_wake.clear()
            batch, self._pending_pcs = sorted(self._pending_pcs), set()
            if not batch:
                continue
            try:
                await handle.signal(PCS_CHANGED_SIGNAL, [list(k) for k in batch], rpc_timeout=RPC_TIMEOUT)
            except RPCError as exc:
                log.warning("reconciler signal failed (%s); it will catch up on its next full pass", exc)


def _versions_of(resource: Resource, obj: JSON) -> Versions | None:
    """The event's resourceVersion under its kind; None where it has none that is an integer."""
    version = resource_version(obj)
    return None if version is None else {resource.kind: version}


def _key(obj: JSON) -> ObjectKey:
    meta = obj.get("metadata", {})
    return (meta.get("namespace", ""), meta.get("name", ""))


def _slim(obj: JSON) -> JSON:
    """What we keep of an object: enough to map a later DELETED (or a vanished one) to its replicas."""
    meta = obj.get("metadata", {})
    return {
        "metadata": {
            "namespace": meta.get("namespace"),
            "name": meta.get("name"),
            "uid": meta.get("uid"),
            "labels": meta.get("labels") or {},
        },
        "spec": {"replicas": (obj.get("spec") or {}).get("replicas")},
    }
