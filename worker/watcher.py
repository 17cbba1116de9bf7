"""The watcher: Kubernetes watch events in, coalesced nudge signals to replica workflows out.

Workflows never poll. Each object kind we care about is followed informer-style (list, then watch from the list's
resourceVersion, relist on expiry and every `resync` period). An event only matters when a field the workflows
act on changed (a pod's readiness, binding, gate or deletion; a PCLQ's existence; a PCS's spec), so each object
keeps a small fingerprint and our own status writes, which change none of those fields, wake nobody.

Nudges are coalesced per replica: while a signal to a workflow is in flight, further events for it collapse into
one follow-up signal.

Nor do the workflow's own steps wake it: a PodClique, PCSG or pod appearing (only a replica's workflow creates
objects with our labels, and the activity that created them hands it what it made), or a pod losing our scheduling
gate and nothing else (the gate release did that and reports it). Each such nudge arrived while that activity
still ran, and cost the workflow a signal and a workflow task that found nothing to do: in B3, about a third of a
replica's history (issue 17).

A worker's first list. A process that has just started remembers nothing, so every item of its first lists is news
to it, and it cannot tell what was deleted while no worker watched: no list shows an object that is gone. It used
to nudge every replica without versions: a read from kube-apiserver each, an activity and a second workflow task
per replica after a restart. It now holds the items until every kind is listed and then tests each replica on the
cache: where nothing is missing or surplus against the plan (so no deletion can have gone unseen), the nudge
carries the items' own resourceVersions, and a read of a cache that has reached them answers it (no round at all if
the workflow has read them already; status writes after its last read usually make them newer); anything else still
reads kube-apiserver. The items' own versions, not the LIST's: every worker's cache reaches an item's version with
that item's watch event, where a LIST's version is reached only by the next event or bookmark of its kind (a minute
on an idle kind).

Nor does a first list hand every PodCliqueSet to the reconciler, which then started each of their replica workflows
again (USE_EXISTING: nothing new, but one call to Temporal each, 1,000 of them after every restart in B5, while the
restarted worker replayed every replica). Only a PCS whose status does not show its generation observed is handed
over: one created, changed or never reconciled while no worker watched (`status.observedGeneration`, written by the
reconciler once it has started every replica's workflow for that generation). A replica whose workflow went
missing meanwhile is still found at once: its first-list nudge finds no workflow, and that tells the reconciler.

Status-only changes. Most watch events of a replica coming up or rolling only move what its status counts: a pod
bound, Running, Ready. Each nudge is a signal in the replica's history, and most bring a workflow task: a 17-pod
replica took about 20 signals from created to Available. A change that the workflow decides on (readiness lost, a
gate or deletion, a pod that failed, the binding that leaves every released pod of a PodGang bound while pods wait
on that gang, Ready while a pod waits for startup order or while a PodClique has pods of two templates, a Ready that
brings a PodClique that had been available back to its minAvailable) is nudged at once; one that only moves status
waits up to the status window (`nudge_status_window`, worker/config.py) from the first such change of its replica,
and goes with the next nudge to that workflow, whichever comes first. Taking a change for status-only by mistake
delays it by the window and nothing else. The change that leaves every pod of a replica Ready goes at once, with
what was held: the replica is up, and its Available waits on it. A gang's binding goes at once only until a nudge
sent at once has told the workflow of that gang bound: kube-scheduler binds the first pods the round releases on it
while the round still removes the other gates, and that binding, which again leaves every released pod of the gang
bound with pods gated, is only status.

The Ready that brings a PodClique to its minAvailable may wait too, yet the workflow acts on it: the first time sets
the PodClique's was-available bit, without which a later loss is no breach. So every watcher remembers, per replica,
the PodCliques (name and UID) a watch event showed at or past minAvailable, and every nudge to the replica carries
them (workflows/nudge_versions.py); the workflow's next round takes each as having reached it where its read shows
that incarnation (grove/evaluate.py, remember_reached). Before, a Ready gained and lost within the window left every
read showing the PodClique short, as if never available, and the loss was no breach. Only a watch event vouches (an
item of a relist may sit beside pods of an older state), and only for a PodClique whose minAvailable the watcher has
heard; a Ready in one it has not heard goes at once.
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
    Resource,
    generation_observed,
    ours,
    pod_gated,
    pod_ready,
    resource_version,
    slim,
)
from activities.metrics import FIRST_LIST_REPLICAS, NUDGE_REQUESTS, NUDGES, WATCH_EVENTS
from activities.watch_cache import WatchCache
from grove import names
from grove.models.podcliqueset import wanted_replicas
from worker import watermark
from workflows.contract import (
    NUDGE_SIGNAL,
    PCS_CHANGED_SIGNAL,
    ReplicaKey,
    parse_replica_workflow_id,
    reconciler_workflow_id,
    replica_query,
)
from workflows.messages import Nudge
from workflows.nudge_versions import sending

log = logging.getLogger(__name__)

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
    gated = pod_gated(obj)
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
    fingerprint: Callable[[JSON], Fingerprint]
    # What the watcher knows, beside the cache's store: (1) relevance needs the previous *fingerprint*; (2) this map
    # lives on the event loop, while the store is written by the watch threads; (3) it keeps the `slim` object of a
    # DELETED found only by relisting, with the labels and replicas that map it to its replicas.
    known: dict[ObjectKey, tuple[Fingerprint, JSON]] = field(default_factory=dict)


Versions = watermark.Versions  # kind -> resourceVersion of the newest watch event a nudge stands for
ReplicaLabels = tuple[str, str, str]  # (namespace, PCS, replica index) as a pod's labels name them


@dataclass(frozen=True)
class _PodFacts:
    """What the status-only test needs of a replica's other pods."""
    base: bool  # in the base gang (scaled pods carry the base PodGang's name)
    gang: str | None  # its PodGang
    bound: bool
    ready: bool
    gated: bool  # our scheduling gate is still on
    waiting: bool  # held by startup order until pods of other cliques are Ready
    clique: str | None
    template: str | None  # the pod template hash: two in one PodClique mean a rollout is under way
    terminating: bool = False  # only Ready pods not being deleted count towards minAvailable
    uid: str = ""

    @staticmethod
    def of(pod: JSON) -> _PodFacts:
        meta = pod.get("metadata", {})
        labels = meta.get("labels") or {}
        return _PodFacts(base=names.LABEL_BASE_PODGANG not in labels, gang=labels.get(names.LABEL_PODGANG),
                         bound=bool((pod.get("spec") or {}).get("nodeName")),
                         ready=pod_ready(pod), gated=pod_gated(pod),
                         waiting=(meta.get("annotations") or {}).get(names.ANNOTATION_STARTUP) == names.STARTUP_WAITING,
                         clique=labels.get(names.LABEL_PODCLIQUE), template=labels.get(names.LABEL_POD_TEMPLATE_HASH),
                         terminating=bool(meta.get("deletionTimestamp")), uid=str(meta.get("uid") or ""))

# A signal's deadline. Without one a call sent into a connection whose packets are being dropped was seen to hang for
# three minutes after the partition had ended (fault smoke, a worker cut off from Temporal for 9 s), holding that
# replica's nudges back the whole time; with one it fails, is kept, and is sent again.
RPC_TIMEOUT = timedelta(seconds=10)
RECONCILER_RETRY_SECONDS = (1.0, 10.0)  # back-off between failed pcs_changed signals to the reconciler
# A worker taking the watcher over nudges the replicas that changed this long before: longer than any nudge takes to
# be sent, with room for the old leader's last failed attempts (it steps down after 5 s of them, worker/leader.py).
HANDOVER_WINDOW_SECONDS = 60.0
TOUCHED_PRUNE_AT = 20_000
# How long the items of the first lists are held for every kind to be listed (module docstring): far longer than the
# lists take while kube-apiserver answers; a kind it refuses would otherwise hold them for good.
FIRST_LIST_PATIENCE_SECONDS = 30.0
# How often the leader checks for a moment with nothing to send, to move its nudge watermark (worker/watermark.py).
WATERMARK_EVERY_SECONDS = 1.0


def _merged(first: Versions | None, second: Versions | None) -> Versions | None:
    """One nudge standing for both: None (no versions: a read from the apiserver answers it) if either has none."""
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
                 status_window_seconds: float = 0.0, retry_seconds: float = 2.0,
                 rpc_timeout: timedelta = RPC_TIMEOUT,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.client = client
        self.rpc_timeout = rpc_timeout
        self.coalesce_seconds = coalesce_seconds
        self.status_window_seconds = status_window_seconds
        self.retry_seconds = retry_seconds
        self.clock = clock
        self._semaphore = asyncio.Semaphore(concurrency)
        self._pending: dict[str, Versions | None] = {}
        # Nudges for changes that only move a replica's status (module docstring, "Status-only changes"), each held
        # for the status window from the first of its replica's changes; any other nudge to the same workflow takes
        # them along at once. Workflow id -> (when it goes, on the loop's clock; versions). In the order they came:
        # with one window for all, also in the order they go.
        self._held: dict[str, tuple[float, Versions | None]] = {}
        self._held_wake = asyncio.Event()
        self._in_flight: set[str] = set()
        self._wake = asyncio.Event()
        self.on_missing: Callable[[str], None] = lambda workflow_id: None
        # What a nudge to this workflow carries beside its versions: the replica's PodCliques seen at minAvailable.
        self.reached_of: Callable[[str], dict[str, str] | None] = lambda workflow_id: None
        self.failing_since: float | None = None  # monotonic: the first failed send since the last one that worked

    def idle(self) -> bool:
        """Nothing to send: every nudge requested so far was delivered (or found its workflow gone)."""
        return not self._pending and not self._held and not self._in_flight

    def request(self, workflow_id: str, versions: Versions | None = None, *, status_only: bool = False) -> None:
        """Nudge `workflow_id` for watch events at `versions` (None: an event without one, answered only by a read
        from the apiserver). `status_only`: the events change nothing the workflow decides on, only the status it
        mirrors; the nudge may wait for the status window."""
        if status_only and self.status_window_seconds > 0 and workflow_id not in self._pending:
            NUDGE_REQUESTS.labels("held").inc()
            if workflow_id in self._held:  # merged in place: its window still ends when it did
                due, held = self._held[workflow_id]
                self._held[workflow_id] = (due, _merged(held, versions))
            else:
                self._held[workflow_id] = (asyncio.get_running_loop().time() + self.status_window_seconds, versions)
                self._held_wake.set()
            return
        NUDGE_REQUESTS.labels("at-once").inc()
        self._queue(workflow_id, versions)

    def _queue(self, workflow_id: str, versions: Versions | None) -> None:
        """Send a nudge for these versions next, with whatever is held or pending for the workflow."""
        if workflow_id in self._held:
            versions = _merged(self._held.pop(workflow_id)[1], versions)
        if workflow_id in self._pending:
            versions = _merged(self._pending[workflow_id], versions)
        self._pending[workflow_id] = versions
        self._wake.set()

    async def run(self) -> None:
        tasks: set[asyncio.Task[None]] = set()
        releasing = asyncio.create_task(self._release_held())
        try:
            await self._send_pending(tasks)
        finally:
            releasing.cancel()
            self._release_all_held()

    async def _release_held(self) -> None:
        """Each held nudge becomes pending when its window ends: one nudge per replica for its window's changes. (A
        window shared by every replica, as before, cut a replica's wave of changes wherever another replica's window
        happened to end: an extra round for a 17-pod replica among ten.)"""
        loop = asyncio.get_running_loop()
        while True:
            await self._held_wake.wait()
            self._held_wake.clear()
            while self._held:
                workflow_id, (due, versions) = next(iter(self._held.items()))
                if due > loop.time():
                    await asyncio.sleep(due - loop.time())
                    continue  # the first may have been taken along meanwhile
                del self._held[workflow_id]
                NUDGE_REQUESTS.labels("window-ended").inc()
                self._queue(workflow_id, versions)

    def _release_all_held(self) -> None:
        held, self._held = self._held, {}
        for workflow_id, (_, versions) in held.items():
            self._queue(workflow_id, versions)

    async def _send_pending(self, tasks: set[asyncio.Task[None]]) -> None:
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
                    with sending(versions, self.reached_of(workflow_id)):
                        await self.client.get_workflow_handle(workflow_id).signal(
                            NUDGE_SIGNAL, Nudge(sent_at=self.clock()), rpc_timeout=self.rpc_timeout)
                NUDGES.labels("sent").inc()
                self.failing_since = None
            except asyncio.CancelledError:  # this term ends (the Lease lost or handed back): a later one sends it
                self._queue(workflow_id, versions)
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
                log.warning("nudge %s failed, retrying in %gs: %s", workflow_id, self.retry_seconds, exc)
                self._queue(workflow_id, versions)  # still in flight meanwhile: new events coalesce into this retry
                await asyncio.sleep(self.retry_seconds)
        finally:
            self._in_flight.discard(workflow_id)
            if workflow_id in self._pending:
                self._wake.set()


class Watcher:
    """Follows PCS, PCSG, PCLQ and pod changes; nudges the affected replica workflows and the reconciler.

    It hears the worker's watch cache (activities/watch_cache.py), which every worker keeps, leader or not. Only the
    leader nudges. A standby remembers which replicas had changes lately, and nudges those when it takes the Lease
    over: the old leader may have died with their nudges unsent. Its view is warm, so a hand-over costs no relist
    and nudges only what changed around it (issue 17: changes reach the workflows within seconds of a kill)."""

    def __init__(
        self,
        kube: Kube,
        client: Client,
        *,
        namespace: str | None = None,
        resync_seconds: float = 1800.0,
        watch_timeout_seconds: int = 300,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        cache: WatchCache | None = None,
        handover_window_seconds: float = HANDOVER_WINDOW_SECONDS,
        rpc_timeout: timedelta = RPC_TIMEOUT,
        nudge_coalesce_seconds: float = 0.005,
        nudge_status_window_seconds: float = 0.0,
        first_list_drift: Callable[[ReplicaKey], tuple[str, ...] | None] | None = None,
        last_watermark: Callable[[], Versions | None] | None = None,
    ) -> None:
        self.kube = kube
        self.client = client
        self.namespace = namespace or None
        self._owns_cache = cache is None
        self.cache = cache or WatchCache(kube, namespace, resync_seconds=resync_seconds,
                                         watch_timeout_seconds=watch_timeout_seconds)
        self.handover_window_seconds = handover_window_seconds
        self.rpc_timeout = rpc_timeout
        self.nudger = Nudger(client, clock=clock, rpc_timeout=rpc_timeout, coalesce_seconds=nudge_coalesce_seconds,
                             status_window_seconds=nudge_status_window_seconds)
        self.nudger.on_missing = self._workflow_missing
        self.nudger.reached_of = self._reached_of
        self.pcs_feed = _Feed(PODCLIQUESETS, pcs_fingerprint)
        self.pclq_feed = _Feed(PODCLIQUES, pclq_fingerprint)
        self.pod_feed = _Feed(PODS, pod_fingerprint)
        self.pcsg_feed = _Feed(SCALINGGROUPS, pcsg_fingerprint)
        self._feeds = {feed.resource.kind: feed for feed in (self.pcs_feed, self.pclq_feed, self.pod_feed,
                                                               self.pcsg_feed)}
        self._pending_pcs: set[ObjectKey] = set()
        self._replica_pods: dict[ReplicaLabels, dict[ObjectKey, _PodFacts]] = {}
        # The replica's PodCliques seen at or past their minAvailable (module docstring, "Status-only changes"):
        # PodClique name -> UID, sent with every nudge to the replica; forgotten with the replica's last pod.
        self._replica_reached: dict[ReplicaLabels, dict[str, str]] = {}
        # The gangs of the replica whose scheduling a nudge sent at once has told its workflow of ("" for the base
        # gang, else the PodGang's name) -> the UIDs of the pods it found bound: a later binding in that gang while
        # those pods are still there is only status (module docstring, "Status-only changes"). This leader's own;
        # forgotten with the replica's last pod.
        self._gangs_told: dict[ReplicaLabels, dict[str, frozenset[str]]] = {}
        self._reconciler_wake = asyncio.Event()
        self.leading = False
        # Standby: workflow id -> (monotonic time of its latest change, the versions to nudge it with).
        self._touched: dict[str, tuple[float, Versions | None]] = {}
        self._following: asyncio.Future[WatchCache] | None = None
        # The first lists of this process (module docstring, "A worker's first list"): workflow id -> the versions
        # of its items, held until every kind is listed; None once they are sent (or with nothing to test them by).
        self._first_list_drift = first_list_drift
        self._first_list: dict[str, Versions | None] | None = {} if first_list_drift is not None else None
        self._testing: asyncio.Future[None] | None = None
        # The previous leader's nudge watermark (read from the Lease when the first lists are tested), and this
        # leader's own, written on the Lease by the elector (worker/watermark.py).
        self._last_watermark = last_watermark
        self.watermark: Versions | None = None

    # --- lifecycle ------------------------------------------------------------------------------------------
    async def follow(self) -> None:
        """Hear the watch cache, starting it if this watcher made it. Every worker follows from its start, leader
        or not; idempotent."""
        if self._following is None:
            loop = asyncio.get_running_loop()

            def heard(resource: Resource, kind: str, obj: JSON, relisted: bool, listed_at: str | None) -> None:
                feed = self._feeds.get(resource.kind)
                if feed is not None and (feed is self.pcs_feed or ours(obj)):
                    loop.call_soon_threadsafe(self._on_event, feed, kind, obj, listed_at, relisted)

            self.cache.subscribe(heard)

            def synced() -> None:  # after every item of the first lists (each reached the loop before its kind synced)
                loop.call_soon_threadsafe(self._first_lists_done)

            self.cache.when_synced(synced)
            loop.call_later(FIRST_LIST_PATIENCE_SECONDS, self._first_lists_overdue)
            self._following = asyncio.ensure_future(asyncio.to_thread(self.cache.start))
        await asyncio.shield(self._following)

    def close(self) -> None:
        """Stop the watches of a cache this watcher made (the worker stops its own)."""
        if self._owns_cache:
            self.cache.stop()

    async def run(self) -> None:
        """One leadership term: nudge until cancelled (the elector cancels it when the Lease is lost, and runs it
        again when it is regained). The watches go on between terms."""
        await self.follow()
        self.nudger.failing_since = None  # a new term is judged on its own sends
        tasks = [asyncio.create_task(self.nudger.run()), asyncio.create_task(self._notify_reconciler()),
                 asyncio.create_task(self._keep_watermark())]
        try:
            self.leading = True
            await self._take_over()
            await asyncio.Event().wait()
        finally:
            self.leading = False
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _take_over(self) -> None:
        """Nudge the replicas that changed within the hand-over window before this term: the previous leader may
        have died (or been cut off) with their nudges unsent. A change the previous leader's watermark covers was
        delivered by it, and is left alone (worker/watermark.py); the others are nudged, and a nudge that finds its
        change already read costs the workflow a signal, not a round (versions)."""
        now = time.monotonic()
        recent = {wid: versions for wid, (at, versions) in self._touched.items()
                  if now - at <= self.handover_window_seconds}
        self._touched.clear()
        if self._pending_pcs:
            self._reconciler_wake.set()
        if not recent:
            return
        delivered = watermark.trusted(await asyncio.to_thread(self._read_last_watermark), self.cache.versions())
        left_alone = 0
        for workflow_id, versions in recent.items():
            if watermark.covers(delivered, versions):
                left_alone += 1
            else:
                self.nudger.request(workflow_id, versions)
        log.info("watcher: took over; nudged %d replica(s) changed in the last %.0fs (%d more left alone: the previous "
                 "leader's watermark shows their changes delivered)", len(recent) - left_alone,
                 self.handover_window_seconds, left_alone)

    async def _keep_watermark(self) -> None:
        """Move the watermark to what the cache has handed on, at a moment when every change handed on has been heard
        and every nudge it made delivered (worker/watermark.py). Under steady churn such moments are rarer and the
        watermark lags: a later leader then nudges more than it must, never less."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(WATERMARK_EVERY_SECONDS)
            handed = self.cache.versions()
            # The watch threads hand each change to this loop before moving their version past it: once a callback
            # queued now has run, every change up to `handed` has been heard here.
            heard: asyncio.Future[None] = loop.create_future()
            loop.call_soon(heard.set_result, None)
            await heard
            if self._quiet():
                self.watermark = handed

    def _quiet(self) -> bool:
        return (self._first_list is None and (self._testing is None or self._testing.done())
                and not self._pending_pcs and self.nudger.idle())

    def lease_annotations(self) -> dict[str, str]:
        """What the elector writes on the Lease with each renewal: this leader's watermark, once it has one."""
        return {watermark.ANNOTATION: watermark.encode(self.watermark)} if self.watermark else {}

    def _nudge(self, workflow_id: str, versions: Versions | None, *, status_only: bool = False) -> None:
        if self.leading:
            self.nudger.request(workflow_id, versions, status_only=status_only)
            return
        now = time.monotonic()
        previous = self._touched.get(workflow_id)
        self._touched[workflow_id] = (now, versions if previous is None else _merged(previous[1], versions))
        if len(self._touched) > TOUCHED_PRUNE_AT:
            self._touched = {wid: entry for wid, entry in self._touched.items()
                             if now - entry[0] <= self.handover_window_seconds}

    def unfit(self, after_seconds: float = 5.0) -> str | None:
        """Why this watcher should not lead: its nudges have been failing (each after the client's ~11 s of
        retries) for `after_seconds` more. The elector then hands the Lease to a worker that may reach Temporal."""
        since = self.nudger.failing_since
        if since is None or time.monotonic() - since < after_seconds:
            return None
        return f"no nudge has reached Temporal for {time.monotonic() - since:.0f}s (plus the client's retries)"

    # --- event handling (event loop thread) -----------------------------------------------------------------
    def _on_event(self, feed: _Feed, kind: str | None, obj: JSON, listed_at: str | None = None,
                  relisted: bool = False) -> None:
        """`listed_at`: the LIST's resourceVersion when the change was found by a (re)list, None for a watch event;
        `relisted`: found by a list after the first."""
        key = _key(obj)
        listed = listed_at is not None
        previous = feed.known.get(key)
        if kind == "DELETED":
            feed.known.pop(key, None)
            relevant = previous is not None
        else:
            fingerprint = feed.fingerprint(obj)
            feed.known[key] = (fingerprint, slim(obj))
            relevant = previous is None or previous[0] != fingerprint
        # Before this event's Ready is noted: whether its PodClique had reached minAvailable already (_heals).
        reached_before = self._reached_uid(obj) if feed is self.pod_feed else None
        siblings = self._pod_facts(key, kind, obj, watched=not listed) if feed is self.pod_feed else None
        if feed is self.pclq_feed and kind == "DELETED":
            self._forget_reached(obj)
        if relevant and not listed and _own_step(feed.resource, previous[0] if previous else None, kind, obj):
            WATCH_EVENTS.labels(feed.resource.plural, "own-step").inc()
            return
        WATCH_EVENTS.labels(feed.resource.plural, str(relevant).lower()).inc()
        if not relevant:
            return
        # An item of a (re)list is relevant against what this process remembered from an earlier term, not because
        # it just changed: a change made and undone meanwhile (scaled 2 -> 4 -> 2 while another worker led) leaves
        # only old resourceVersions behind, which the workflow's last read already covers. Such nudges carry no
        # versions: the workflow reads the apiserver for them (fault run seed 42, round 3: surplus pods left for
        # minutes). So do deletions a relist found: their own version is the last one this process saw, which that
        # read may cover too, and the deletion would go unseen. Runs begun before replica-baseline-5 judge them by
        # this process's clock (workflows/nudges.py).
        # An item of this process's first list is held with its own version until every kind is listed, and then
        # tested (_first_lists_done).
        first = listed and not relisted and self._first_list is not None and kind != "DELETED"
        versions = _versions_of(feed.resource, obj) if first or not listed else None
        if feed is self.pcs_feed:
            if kind == "ADDED" and not listed and previous is None:
                # Created while this process watched: its uid is in every replica workflow's id, so none runs until
                # the reconciler starts it, and one it starts reads the PodCliqueSet itself. Nudges would each find
                # no workflow and tell the reconciler what it is told here (B3: a failed signal per replica).
                self.tell_reconciler(key)
                return
            self._pcs_changed(key, obj, previous[1] if previous else None, versions, self._hold if first else None,
                              tell=not (first and _reconciled(obj)))
            return
        replica = _replica_labels(obj) if siblings is not None else None  # a pod of a replica
        status_only = (siblings is not None and not listed and previous is not None and kind != "DELETED"
                       and _status_only(previous[0], feed.known[key][0], siblings[key], siblings,
                                        self._clique_spec(key[0], siblings[key].clique)[0] is not None,
                                        self._gangs_told.get(replica, {}) if replica is not None else {})
                       and not _all_ready(siblings)
                       and not (previous[0][READY] != "True" and self._heals(key, siblings, reached_before)))
        if siblings is not None and replica is not None and not status_only and not first and self.leading:
            self._tell_gang(replica, siblings[key], siblings)  # its nudge goes at once
        for replica_key in self._replica_keys(obj):
            if first:
                self._hold(replica_key.workflow_id, versions)
            else:
                self._nudge(replica_key.workflow_id, versions, status_only=status_only)

    def _pod_facts(self, key: ObjectKey, kind: str | None, pod: JSON, *,
                   watched: bool) -> dict[ObjectKey, _PodFacts] | None:
        """Keep the pod's facts under its replica; the replica's pods' facts, None for a pod of no replica.
        `watched`: a watch event, so the replica's pods as now kept are a state the store really had."""
        replica = _replica_labels(pod)
        if replica is None:
            return None
        pods = self._replica_pods.setdefault(replica, {})
        if kind == "DELETED":
            pods.pop(key, None)
            if not pods:
                del self._replica_pods[replica]
                self._replica_reached.pop(replica, None)
                self._gangs_told.pop(replica, None)
            return None
        pods[key] = facts = _PodFacts.of(pod)
        if watched and facts.ready:
            self._note_reached(replica, key[0], facts, pods)
        return pods

    def _reached_uid(self, pod: JSON) -> str | None:
        """The UID of the pod's PodClique incarnation if a watch event has shown it at or past minAvailable."""
        replica = _replica_labels(pod)
        reached = self._replica_reached.get(replica) if replica is not None else None
        clique = (pod.get("metadata", {}).get("labels") or {}).get(names.LABEL_PODCLIQUE)
        return reached.get(clique) if reached and clique else None

    def _heals(self, key: ObjectKey, siblings: dict[ObjectKey, _PodFacts], reached_before: str | None) -> bool:
        """The pod's Ready (just gained) brings its PodClique, which had been available, back to minAvailable: a
        breach ends, and the workflow cancels the termination it timed. Nudged at once, not held for the window:
        the status would go on showing the breach, and the Temporal UI the termination pending."""
        facts = siblings[key]
        min_available, uid = self._clique_spec(key[0], facts.clique)
        if not facts.ready or min_available is None or not uid or reached_before != uid:
            return False
        return _ready_in(pod for pod in siblings.values() if pod.clique == facts.clique) == min_available

    def _tell_gang(self, replica: ReplicaLabels, facts: _PodFacts, siblings: dict[ObjectKey, _PodFacts]) -> None:
        """A nudge goes at once while every released pod of this pod's gang is bound: its round sees the gang
        scheduled (it reads at least this event), so remember which pods it saw bound."""
        scheduled = _gang_scheduled(facts, siblings)
        if scheduled is not None:
            self._gangs_told.setdefault(replica, {})[scheduled[0]] = scheduled[1]

    def _note_reached(self, replica: ReplicaLabels, namespace: str, facts: _PodFacts,
                      pods: dict[ObjectKey, _PodFacts]) -> None:
        """Remember that the Ready pod's PodClique is at or past its minAvailable: the first time sets its
        was-available bit, and the nudge that would have told the workflow may wait for the status window, while
        a Ready lost meanwhile goes at once (module docstring, "Status-only changes"). Not while the PodClique has
        pods of two templates: a rolling update's Ready sets no was-available bit."""
        min_available, uid = self._clique_spec(namespace, facts.clique)
        if min_available is None or not uid:
            return
        members = [pod for pod in pods.values() if pod.clique == facts.clique]
        if any(pod.template != facts.template for pod in members):
            return
        if _ready_in(members) >= min_available:
            assert facts.clique is not None
            self._replica_reached.setdefault(replica, {})[facts.clique] = uid

    def _forget_reached(self, pclq: JSON) -> None:
        """A PodClique deleted (gang-terminated, scaled in): its incarnation's crossing is no longer news to send."""
        meta = pclq.get("metadata", {})
        replica = _replica_labels(pclq)
        if replica is None:
            return
        reached = self._replica_reached.get(replica)
        if reached is not None and reached.get(meta.get("name", "")) == meta.get("uid"):
            del reached[meta["name"]]
            if not reached:
                del self._replica_reached[replica]

    def _reached_of(self, workflow_id: str) -> dict[str, str] | None:
        """What a nudge to this replica workflow carries of `_replica_reached` (workflows/nudge_versions.py)."""
        key = parse_replica_workflow_id(workflow_id)
        reached = self._replica_reached.get((key.namespace, key.pcs, str(key.replica))) if key else None
        return dict(reached) if reached else None

    def _clique_spec(self, namespace: str, clique: str | None) -> tuple[int | None, str | None]:
        """The pod's PodClique as last heard: its minAvailable (None where not known yet) and UID."""
        known = self.pclq_feed.known.get((namespace, clique)) if clique else None
        if known is None:
            return None, None
        value = (known[1].get("spec") or {}).get("minAvailable")
        return (value if isinstance(value, int) else None), known[1]["metadata"].get("uid")

    def _hold(self, workflow_id: str, versions: Versions | None) -> None:
        """An item of the first list: kept, its versions merged with the replica's other items'."""
        assert self._first_list is not None
        if workflow_id in self._first_list:
            versions = _merged(self._first_list[workflow_id], versions)
        self._first_list[workflow_id] = versions

    def _first_lists_done(self) -> None:
        """Every kind is listed: test the replicas the first lists found (in a thread: a plan per replica), then
        nudge them. Changes heard from now on are nudged as they come."""
        held, self._first_list = self._first_list, None
        if held and self._first_list_drift is not None:
            self._testing = asyncio.ensure_future(self._nudge_first_listed(held, self._first_list_drift))

    def _first_lists_overdue(self) -> None:
        """Some kind is still not listed (kube-apiserver refuses it, or is unreachable): what the first lists found is
        nudged now, for reads from kube-apiserver, rather than held for as long as that lasts."""
        held, self._first_list = self._first_list, None
        if held:
            log.warning("watcher: not every kind listed after %.0fs; nudging the %d replica(s) found so far for a read "
                        "from kube-apiserver", FIRST_LIST_PATIENCE_SECONDS, len(held))
            for workflow_id in held:
                self._nudge(workflow_id, None)

    async def _nudge_first_listed(self, held: dict[str, Versions | None],
                                  drift_of: Callable[[ReplicaKey], tuple[str, ...] | None]) -> None:
        """Each replica with its items' versions where the cache shows it whole (nothing missing or surplus, so no
        deletion can have gone unseen by a process that remembers nothing), without versions (a read from
        kube-apiserver) otherwise. A whole replica whose items are all covered by the previous leader's watermark is
        not nudged at all: that leader delivered every change of it (worker/watermark.py)."""
        def test() -> tuple[dict[str, Versions | None], dict[str, Versions | None]]:
            covered = watermark.trusted(self._read_last_watermark(), self.cache.versions())
            tested, unchanged = {}, {}
            for workflow_id, versions in held.items():
                key = parse_replica_workflow_id(workflow_id)
                whole = versions is not None and key is not None and drift_of(key) == ()
                if whole and watermark.covers(covered, versions):
                    unchanged[workflow_id] = versions
                else:
                    tested[workflow_id] = versions if whole else None
            return tested, unchanged

        try:
            tested, unchanged = await asyncio.to_thread(test)
        except Exception:  # noqa: BLE001 - never leave them unnudged: each then reads kube-apiserver
            log.exception("watcher: testing the replicas of the first lists failed; nudging them for a fresh read")
            tested, unchanged = dict.fromkeys(held), {}
        for workflow_id, versions in tested.items():
            self._nudge(workflow_id, versions)
        whole = sum(1 for versions in tested.values() if versions is not None)
        for outcome, count in (("versions", whole), ("read", len(tested) - whole), ("unchanged", len(unchanged))):
            FIRST_LIST_REPLICAS.labels(outcome).inc(count)
        log.info("watcher: first lists: %d replica(s) nudged with their items' versions (whole in the cache), %d for "
                 "a read from kube-apiserver, %d not nudged (whole, and unchanged since the previous leader's "
                 "watermark)", whole, len(tested) - whole, len(unchanged))
        if unchanged:
            await self._find_missing(unchanged)

    async def _find_missing(self, unchanged: dict[str, Versions | None]) -> None:
        """A replica left alone gets no nudge, so no nudge can find its workflow gone (terminated while no worker
        ran): one visibility query looks for them among the running replica workflows instead, and the reconciler is
        told of any it lacks. If the query fails, they are nudged after all, with their items' versions."""
        try:
            running = {execution.id async for execution in self.client.list_workflows(
                replica_query(namespace=self.namespace), rpc_timeout=self.rpc_timeout)}
        except Exception as exc:  # noqa: BLE001 - unsure, nudge: a nudge to a missing workflow tells the reconciler
            log.warning("watcher: could not list the running replica workflows (%s); nudging the %d replica(s) left "
                        "alone", exc, len(unchanged))
            for workflow_id, versions in unchanged.items():
                self._nudge(workflow_id, versions)
            return
        missing = [workflow_id for workflow_id in unchanged if workflow_id not in running]
        for workflow_id in missing:
            self._workflow_missing(workflow_id)
        if missing:
            log.info("watcher: first lists: %d replica(s) left alone have no running workflow; told the reconciler",
                     len(missing))

    def _read_last_watermark(self) -> Versions | None:
        if self._last_watermark is None:
            return None
        try:
            return self._last_watermark()
        except Exception as exc:  # noqa: BLE001 - unread, it skips nothing: every replica is nudged as before
            log.warning("watcher: could not read the previous leader's nudge watermark (%s); nudging every replica "
                        "of the first lists", exc)
            return None

    def _pcs_changed(self, key: ObjectKey, obj: JSON, previous: JSON | None, versions: Versions | None,
                     nudge: Callable[[str, Versions | None], None] | None = None, *, tell: bool = True) -> None:
        nudge = nudge or self._nudge
        if tell:
            self.tell_reconciler(key)
        # Every replica that may exist before or after the change re-reads its spec (scale in/out, deletion).
        for version in (previous, obj):
            if version is None:
                continue
            uid = version.get("metadata", {}).get("uid")
            replicas = wanted_replicas(version) or 0
            for index in range(replicas):
                nudge(ReplicaKey(key[0], key[1], uid, index).workflow_id, versions)

    def _replica_keys(self, obj: JSON) -> Iterable[ReplicaKey]:
        replica = _replica_labels(obj)
        if replica is None or not replica[2].isdigit():
            return ()
        namespace, pcs, index = replica
        known = self.pcs_feed.known.get((namespace, pcs))
        if known is None:
            return ()
        return (ReplicaKey(namespace, pcs, known[1]["metadata"]["uid"], int(index)),)

    def _workflow_missing(self, workflow_id: str) -> None:
        """A nudge found no running workflow: let the reconciler decide whether one should exist."""
        key = parse_replica_workflow_id(workflow_id)
        if key is not None:
            self.tell_reconciler((key.namespace, key.pcs))

    def tell_reconciler(self, key: ObjectKey) -> None:
        """Add a PodCliqueSet to the batch the reconciler is told about, and wake the sender: a change added while a
        held send is being retried must not wait for the next one (the retry may already have gone through)."""
        self._pending_pcs.add(key)
        self._reconciler_wake.set()

    async def _notify_reconciler(self) -> None:
        handle = self.client.get_workflow_handle(reconciler_workflow_id(self.namespace))
        delay = RECONCILER_RETRY_SECONDS[0]
        while True:
            await self._reconciler_wake.wait()
            self._reconciler_wake.clear()
            batch, self._pending_pcs = sorted(self._pending_pcs), set()
            if not batch:
                continue
            try:
                await handle.signal(PCS_CHANGED_SIGNAL, [list(k) for k in batch],
                                    rpc_timeout=self.rpc_timeout)
                delay = RECONCILER_RETRY_SECONDS[0]
            except (RPCError, asyncio.CancelledError) as exc:
                # Kept for the next try, or for this worker's next term: dropped, a change would wait for the
                # reconciler's full pass (ten minutes).
                self._pending_pcs.update(batch)
                if isinstance(exc, asyncio.CancelledError):
                    raise
                log.warning("reconciler signal for %d PodCliqueSet(s) failed (%s); retrying in %gs", len(batch),
                            exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RECONCILER_RETRY_SECONDS[1])
                self._reconciler_wake.set()


GATED = 3  # where pod_fingerprint keeps whether our scheduling gate is on


def _own_step(resource: Resource, before: Fingerprint | None, kind: str | None, obj: JSON) -> bool:
    """The change is a step the replica's own workflow took and already knows of (module docstring): one of our
    objects of a replica kind created, or a pod's gate removed with nothing else changed. A change heard only by a
    relist is never taken for one (the caller checks): its cause is not known."""
    if resource.kind == PODCLIQUESETS.kind or not ours(obj) or kind == "DELETED":
        return False
    if before is None:
        return kind == "ADDED"
    if resource.kind != PODS.kind:
        return False
    after = pod_fingerprint(obj)
    return (before[GATED] and not after[GATED]
            and before[:GATED] + before[GATED + 1:] == after[:GATED] + after[GATED + 1:])


NODE, SCHEDULED, READY, PHASE = 2, 4, 5, 6  # where pod_fingerprint keeps them


def _status_only(before: Fingerprint, after: Fingerprint, facts: _PodFacts,
                 siblings: dict[ObjectKey, _PodFacts], min_available_known: bool = True,
                 gangs_told: dict[str, frozenset[str]] | None = None) -> bool:
    """A pod change that moves only what its replica's status counts (module docstring, "Status-only changes"):
    phase Pending to Running, Ready gained, a binding. Never one the workflow may act on: readiness lost (a breach
    begins), failed or finished, a gate gained or lost, deletion begun; nor Ready gained while a pod of the replica
    waits for startup order (its release may wait on this one) or has another template (a rolling update waits on
    it) or is in a PodClique whose minAvailable the watcher has not heard (`_note_reached` cannot vouch for it), nor
    the binding that leaves every released pod of its PodGang bound while a pod waits on that gang being scheduled:
    for the base gang any gated pod of the replica (the scaled gangs and the base gang's surplus pods are released
    on it), for a scaled gang a gated pod of its own (its surplus pods, which the kube backend releases on it). Not
    that binding either once a nudge sent at once told the workflow of that gang bound (`gangs_told`: the gang's
    bound pods then) and those pods are still bound in it: the round that nudge woke is already releasing what
    waited, and kube-scheduler binds the first of those pods before the round has removed every gate (an extra
    round for 15% of the 17-pod replicas at 1,000 replicas). A change taken for status-only wrongly costs only the
    window's latency: the nudge is still sent."""
    if before[:NODE] != after[:NODE] or before[GATED] != after[GATED]:
        return False
    if before[READY] == "True" and after[READY] != "True":
        return False
    if after[PHASE] in ("Failed", "Succeeded"):
        return False
    if after[READY] == "True" and before[READY] != "True" and (any(
            pod.waiting or (pod.clique == facts.clique and pod.template != facts.template)
            for pod in siblings.values()) or not min_available_known):
        return False
    if before[NODE] == after[NODE] and before[SCHEDULED] == after[SCHEDULED]:
        return True
    scheduled = _gang_scheduled(facts, siblings)
    if scheduled is None:
        return True
    told = (gangs_told or {}).get(scheduled[0])
    return told is not None and told <= scheduled[1]


def _gang_scheduled(facts: _PodFacts, siblings: dict[ObjectKey, _PodFacts]) -> tuple[str, frozenset[str]] | None:
    """When every released pod of the pod's gang is bound while a pod waits on that gang being scheduled: the gang
    ("" for the base gang, else its PodGang's name) and the UIDs of its bound pods. None otherwise."""
    # Released pods, not all pods: a PodClique's pods past its minAvailable keep their gate until their gang is
    # scheduled (grove/scheduling.py), so "every pod of the gang bound" never held for such a gang, and its held
    # pods went out a status window late (1 s for a 17-pod replica of four frontends and five decoders).
    gang = [pod for pod in siblings.values() if (pod.base if facts.base else pod.gang == facts.gang)]
    # A pod held by startup order waits on Ready, not on its gang's binding (Ready there goes at once, above).
    waiting_on_it = siblings.values() if facts.base else [pod for pod in gang if not pod.waiting]
    if not (all(pod.bound for pod in gang if not pod.gated) and any(pod.gated for pod in waiting_on_it)):
        return None
    return ("" if facts.base else facts.gang or ""), frozenset(pod.uid for pod in gang if pod.bound)


def _ready_in(pods: Iterable[_PodFacts]) -> int:
    """The Ready pods not being deleted: what counts towards a PodClique's minAvailable."""
    return sum(1 for pod in pods if pod.ready and not pod.terminating)


def _all_ready(siblings: dict[ObjectKey, _PodFacts]) -> bool:
    """Every pod of the replica is Ready (so none is gated): the last change of its coming up, the one its status
    (Available) waits on. Nudged at once, with the held changes, though the workflow decides nothing on it. Not
    while a pod is still gated: the base gang's last Ready often comes while its release round runs, and would wake
    another round for nothing."""
    return all(pod.ready for pod in siblings.values())


def _reconciled(pcs: JSON) -> bool:
    """An item of a first list the reconciler need not be told of (module docstring, "A worker's first list"): its
    status shows the current generation observed, so the reconciler has judged this spec and started every replica's
    workflow for it. Not while the Grove operator's finalizer is on it: who drives it is the reconciler's to judge."""
    return (generation_observed(pcs)
            and names.GROVE_OPERATOR_PCS_FINALIZER not in (pcs.get("metadata", {}).get("finalizers") or []))


def _replica_labels(obj: JSON) -> ReplicaLabels | None:
    """(namespace, PCS, replica index) as the object's labels name them; None for an object of no replica."""
    meta = obj.get("metadata", {})
    labels = meta.get("labels") or {}
    pcs, index = labels.get(names.LABEL_PART_OF), labels.get(names.LABEL_PCS_REPLICA_INDEX)
    if not pcs or index is None:
        return None
    return (meta.get("namespace", ""), str(pcs), str(index))


def _versions_of(resource: Resource, obj: JSON) -> Versions | None:
    """The event's resourceVersion under its kind; None where it has none that is an integer."""
    version = resource_version(obj)
    return None if version is None else {resource.kind: version}


def _key(obj: JSON) -> ObjectKey:
    meta = obj.get("metadata", {})
    return (meta.get("namespace", ""), meta.get("name", ""))
