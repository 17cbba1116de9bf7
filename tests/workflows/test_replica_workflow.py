"""The middle tier: the real ReplicaWorkflow on a real Temporal dev server, with scripted activities standing in
for Kubernetes. It proves workflow behaviour (durable timers, pause, controls, what is called with what) in
seconds; it says nothing about Kubernetes, which tests/e2e proves on the real control plane."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio import activity
from temporalio.client import (
    Client,
    WorkflowHandle,
    WorkflowHistory,
    WorkflowUpdateFailedError,
)
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

from grove import names
from grove.models import PodCliqueSet
from grove.plan import topology_for
from grove.termination import Scope
from localstack.temporal import TemporalDevServer
from tests.histories import replayer, run_histories, save
from worker.history_activities import activity_names, local_activity, patches_in
from workflows import contract, nudge_versions, presentation
from workflows.messages import (
    CachedObserveRequest,
    CliqueState,
    ControlResult,
    DeleteReplicaResult,
    EnsureRequest,
    EnsureResult,
    EventRequest,
    ForceTerminateRequest,
    MirrorRequest,
    MirrorWithRead,
    Nudge,
    PauseRequest,
    PcsState,
    Phase,
    ReleaseRequest,
    ReleaseResult,
    ReplicaInput,
    ReplicaRef,
    ReplicaSnapshot,
    ReplicaStatus,
    TerminateRequest,
    TerminateResult,
)
from workflows.nudge_versions import NudgeVersionsInterceptor
from workflows.nudges import NUDGED_FLOOR_PATCH, TIMED_NUDGES_PATCH, UNVERSIONED_COUNTED_PATCH
from workflows.patches import REPLICA_BASELINE_12_PATCH
from workflows.replica import (
    LOCAL_ENSURE_PATCH,
    LOCAL_RELEASES_PATCH,
    MIRROR_WITH_ENSURE_PATCH,
    MIRROR_WITH_READ_PATCH,
    ROUND_BEFORE_HANDOVER_PATCH,
    UPDATE_HANDOVER_PATCH,
    ReplicaWorkflow,
)

pytestmark = pytest.mark.stack  # starts a real Temporal dev server of its own (no Kubernetes)

DELAY = timedelta(seconds=2)
_EXECUTOR = ThreadPoolExecutor(max_workers=8)  # the scripted activities are synchronous, as the real ones


def _pcs(name: str, termination_delay: timedelta = DELAY) -> PodCliqueSet:
    return PodCliqueSet.model_validate({
        "apiVersion": "grove.io/v1alpha1", "kind": "PodCliqueSet",
        "metadata": {"name": name, "namespace": "ns", "uid": "uid-1"},
        "spec": {"replicas": 1, "template": {
            "terminationDelay": f"{int(termination_delay.total_seconds())}s",
            "cliques": [{"name": "api", "spec": {"roleName": "api", "replicas": 2, "minAvailable": 2, "podSpec": {
                "containers": [{"name": "c", "image": "i"}]}}}],
        }},
    })


class ScriptedCluster:
    """What the activities report: every PodClique of the plan exists with `ready` Ready pods. Records calls."""

    def __init__(self, pcs: PodCliqueSet) -> None:
        self.topology = topology_for(pcs, 0)
        self.ready = 2
        self.incarnation = 1
        self.terminated: list[tuple[datetime, TerminateRequest]] = []
        self.events: list[str] = []
        self.calls: list[str] = []  # observe, observe (cache), terminate, ... in the order the workflow made them
        self.cache_ready: int | None = None  # what the watch cache says, where it lags the cluster
        self.mirror_failures = 0  # the next this many status mirrors fail (kube-apiserver unreachable)
        self.cache_delay = 0.0  # seconds each read from the watch cache takes (a loaded worker)
        self.read_clock_ahead = timedelta(0)  # the activity clock's lead over workflow time, as read_at says
        self.breached_reads: list[datetime] = []  # read_at of every read that showed a PodClique short of Ready
        self.healed_reports = 0  # the next this many terminations report the breach healed and delete nothing
        self.read_mirrors = False  # reads from the cache write the status the workflow asks them to, as the real one
        self.read_digests_wrong = False  # ... but report digests other than the workflow computes
        self.mirrored_by_read: list[str] = []  # object names each such read wrote, in order
        self.mirrored_by_round: list[str] = []  # object names mirror_status wrote, in order
        self.made = True  # False: a new replica, nothing there until ensure_replica_releasing makes it
        self._lock = threading.Lock()

    def snapshot(self, ready: int | None = None) -> ReplicaSnapshot:
        now = datetime.now(UTC)
        read_at = now + self.read_clock_ahead
        with self._lock:
            cliques = {unit.name: CliqueState(uid=f"{unit.name}-{self.incarnation}", pods=2,
                                              ready=self.ready if ready is None else ready,
                                              scheduled=2) for unit in self.topology.cliques}
            if any(clique.ready < 2 for clique in cliques.values()):
                self.breached_reads.append(read_at)
        return ReplicaSnapshot(read_at=read_at, read_from=now, pcs_state=PcsState.PRESENT, wanted_replicas=1,
                               topology=self.topology, cliques=cliques)

    def activities(self) -> list[object]:
        @activity.defn(name=contract.OBSERVE_REPLICA)
        def observe(ref: ReplicaRef) -> ReplicaSnapshot:
            self.calls.append("observe")
            return self.snapshot()

        @activity.defn(name=contract.OBSERVE_REPLICA_CACHED)
        def observe_cached(request: CachedObserveRequest) -> ReplicaSnapshot:
            self.calls.append("observe (cache)")
            return self.cached_read(request.ref, request.mirror)

        @activity.defn(name=contract.ENSURE_REPLICA_RELEASING)
        def ensure_releasing(request: EnsureRequest) -> EnsureResult:
            """Materialising, or a new replica's first read (first_read): makes what `made` says is missing."""
            self.calls.append("read and materialise (cache)" if request.first_read else "materialise")
            made, self.made = not self.made, True
            return EnsureResult(created=("PodClique/scripted",) if made else (),
                                snapshot=self.cached_read(request.ref, request.mirror))

        @activity.defn(name=contract.ENSURE_REPLICA)
        def ensure(ref: ReplicaRef) -> EnsureResult:
            return EnsureResult(snapshot=self.snapshot())

        @activity.defn(name=contract.ENSURE_REPLICA_CACHED)
        def ensure_cached(request: CachedObserveRequest) -> EnsureResult:
            return EnsureResult(snapshot=self.snapshot(self.cache_ready).model_copy(
                update={"from_cache": True, "read_from": None}))

        @activity.defn(name=contract.RELEASE_GATES)
        def release(request: ReleaseRequest) -> ReleaseResult:
            return self.release(request)

        @activity.defn(name=contract.MIRROR_STATUS)
        def mirror(request: MirrorRequest) -> list[str]:
            with self._lock:
                if self.mirror_failures > 0:
                    self.mirror_failures -= 1
                    raise RuntimeError("kube-apiserver unreachable")
                self.mirrored_by_round.extend(m.name for m in request.objects)
            return [m.name for m in request.objects]

        @activity.defn(name=contract.RECORD_EVENT)
        def record(request: EventRequest) -> None:
            self.events.append(request.reason)

        @activity.defn(name=contract.TERMINATE_GANG)
        def terminate(request: TerminateRequest) -> TerminateResult:
            self.calls.append("terminate")
            with self._lock:
                self.terminated.append((datetime.now(UTC), request))
                if self.healed_reports > 0:
                    self.healed_reports -= 1
                    return TerminateResult(at=datetime.now(UTC), healed="the breach has healed (scripted)")
                self.incarnation += 1
                self.ready = 2  # recreated and Ready again
            return TerminateResult(deleted=tuple(request.cliques), at=datetime.now(UTC))

        @activity.defn(name=contract.DELETE_REPLICA)
        def delete(ref: ReplicaRef) -> DeleteReplicaResult:
            return DeleteReplicaResult()

        return [observe, observe_cached, ensure, ensure_cached, ensure_releasing, release, mirror, record, terminate,
                delete]

    def cached_read(self, ref: ReplicaRef, mirror: MirrorWithRead | None) -> ReplicaSnapshot:
        """What the watch cache says; where the workflow asks and `read_mirrors` is set, with the round's status
        written as the real read writes it."""
        time.sleep(self.cache_delay)
        found = self.snapshot(self.cache_ready).model_copy(update={"from_cache": True, "read_from": None})
        if not self.made:
            return found.model_copy(update={"drift": ("missing PodClique scripted",)})
        planned = (presentation.mirrors_with_read(mirror, found, ref.replica)
                   if self.read_mirrors and mirror is not None else None)
        if planned is None:
            return found
        objects, _, written = planned
        self.mirrored_by_read.extend(item.name for item in objects)
        if self.read_digests_wrong:
            written = written.model_copy(update={"digests": dict.fromkeys(written.digests, "0" * 16)})
        return found.model_copy(update={"mirrored": written})

    def release(self, request: ReleaseRequest) -> ReleaseResult:
        """What release_gates does here: nothing is gated in this cluster."""
        return ReleaseResult(released=tuple(request.pods))


async def _run(client: Client, cluster: ScriptedCluster, safety_resync: timedelta = timedelta(hours=6),
               task_timeout: timedelta | None = None,
               **fields: Any) -> tuple[Worker, WorkflowHandle[ReplicaWorkflow, object]]:
    """A worker for `cluster` (not yet running) and a replica workflow started on its queue; `fields`: more of
    ReplicaInput's."""
    queue = f"mt-{uuid.uuid4().hex[:8]}"
    worker = Worker(client, task_queue=queue, workflows=[ReplicaWorkflow], activities=cluster.activities(),
                    activity_executor=_EXECUTOR)
    ref = ReplicaRef(namespace="ns", pcs=cluster.topology.pcs, pcs_uid=uuid.uuid4().hex, replica=0)
    handle = await client.start_workflow(ReplicaWorkflow.run, ReplicaInput(ref=ref, safety_resync=safety_resync, **fields),
                                         id=ref.workflow_id, task_queue=queue, task_timeout=task_timeout)
    return worker, handle


async def _status(handle: WorkflowHandle[ReplicaWorkflow, object]) -> ReplicaStatus:
    result: ReplicaStatus = await handle.query(contract.STATUS_QUERY, result_type=ReplicaStatus)
    return result


async def _until(handle: WorkflowHandle[ReplicaWorkflow, object], check: object, timeout: float = 20) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        if check(await _status(handle)):  # type: ignore[operator]
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out; last status: {await _status(handle)}")


def _first_run(client: Client, handle: WorkflowHandle[ReplicaWorkflow, object]) -> WorkflowHandle[ReplicaWorkflow, object]:
    """The run `handle` started, where the replica may have handed over since (continue-as-new)."""
    return client.get_workflow_handle(handle.id, run_id=handle.result_run_id)


async def _breach(cluster: ScriptedCluster, handle: WorkflowHandle[ReplicaWorkflow, object]) -> None:
    cluster.ready = 1
    await handle.signal(contract.NUDGE_SIGNAL, Nudge(sent_at=datetime.now(UTC)))


async def test_a_breach_is_terminated_once_by_the_durable_timer_never_before_its_deadline(client: Client) -> None:
    cluster = ScriptedCluster(_pcs("timer"))
    worker, handle = await _run(client, cluster)
    async with worker:
        await _until(handle, lambda s: s.phase is Phase.AVAILABLE)
        await _breach(cluster, handle)
        await _until(handle, lambda s: bool(s.deadlines))
        deadline = (await _status(handle)).deadlines[0].due_at
        await _until(handle, lambda s: s.terminations_total == 1, timeout=DELAY.total_seconds() + 15)
        (at, request), = cluster.terminated
        assert request.scope is Scope.PCS_REPLICA and request.deadline == deadline
        assert at >= deadline, f"terminated {deadline - at} before its deadline"
        assert request.cliques == {"timer-0-api": "timer-0-api-1"}, "the incarnation that breached, by UID"
        await asyncio.sleep(DELAY.total_seconds() + 1)
        assert len(cluster.terminated) == 1, "a recreated, healthy replica is not terminated again"
        assert "BreachDetected" in cluster.events
        # Every activity, the termination included, is retried 20 s after its worker is lost (worker/heartbeats.py)
        assert _heartbeat_timeouts(await _first_run(client, handle).fetch_history()) == {contract.ACTIVITY_HEARTBEAT_TIMEOUT}


async def test_a_termination_found_healed_deletes_nothing_and_a_breach_seen_again_starts_a_new_clock(
        client: Client, pytestconfig: pytest.Config) -> None:
    """terminate_gang reports the breach healed on a read of its own (an attempt retried after an outage): the run
    counts no termination and stops the breach's clock. Here the workflow's next read still shows the PodClique
    short (it flapped back): that is a new breach, due a whole delay later, not at once on the old clock."""
    cluster = ScriptedCluster(_pcs("flap"))
    cluster.healed_reports = 1
    worker, handle = await _run(client, cluster)
    async with worker:
        await _until(handle, lambda s: s.phase is Phase.AVAILABLE)
        await _breach(cluster, handle)
        await _until(handle, lambda s: len(cluster.terminated) == 1, timeout=DELAY.total_seconds() + 15)
        await _until(handle, lambda s: s.terminations_total == 1, timeout=2 * DELAY.total_seconds() + 15)
        history = await _first_run(client, handle).fetch_history()
    (found_healed_at, first), (_, second) = cluster.terminated
    assert first.recheck is not None, "a breach's termination carries what it was decided on"
    assert first.recheck.memory.clique_breach_starts == {"flap-0-api": first.breach_start}
    assert first.recheck.topology == cluster.topology and first.recheck.read_at <= found_healed_at
    assert first.breach_start is not None and second.breach_start is not None
    assert second.breach_start >= found_healed_at, "the old clock was stopped"
    assert second.deadline == second.breach_start + DELAY
    assert second.recheck is not None and second.cliques == first.cliques
    assert cluster.events.count("BreachDetected") == 2, cluster.events
    await replayer().replay_workflow(history)
    if pytestconfig.getoption("--record-histories"):
        save(history, "termination_found_healed_then_new_breach")


async def test_a_forced_termination_carries_no_recheck(client: Client) -> None:
    """An operator's force-terminate is carried out whatever a later read shows: nothing to decide again."""
    cluster = ScriptedCluster(_pcs("forced"))
    worker, handle = await _run(client, cluster)
    async with worker:
        await _until(handle, lambda s: s.phase is Phase.AVAILABLE)
        result = await handle.execute_update(contract.FORCE_TERMINATE, ForceTerminateRequest(reason="t"),
                                             result_type=ControlResult)
        await _until(handle, lambda s: s.terminations_total == 1)
    assert result.accepted
    (_, request), = cluster.terminated
    assert request.forced and request.recheck is None


async def test_a_breach_never_begins_before_the_read_that_showed_it(client: Client) -> None:
    """The round's decision time is not earlier than its read (READ_TIME_FLOOR_PATCH). A worker that took a workflow
    over after a SIGKILL ran its first round at the dead worker's last task time, and stamped a breach it had just
    read seconds before the pod broke; here the read is taken 30 s after the workflow's own time, as then."""
    cluster = ScriptedCluster(_pcs("stamp"))
    cluster.read_clock_ahead = timedelta(seconds=30)
    worker, handle = await _run(client, cluster)
    async with worker:
        await _until(handle, lambda s: s.phase is Phase.AVAILABLE)
        await _breach(cluster, handle)
        await _until(handle, lambda s: bool(s.deadlines))
        deadline = (await _status(handle)).deadlines[0]
        history = await _first_run(client, handle).fetch_history()
    await replayer().replay_workflow(history)  # the patched path replays (a run of it is kept as a replay fixture:
    # tests/fixtures/histories/breach_stamped_at_read.json)
    assert cluster.breached_reads, "a read showed the breach"
    assert deadline.breach_start >= cluster.breached_reads[0], (
        f"breach stamped {cluster.breached_reads[0] - deadline.breach_start} before the read that showed it")
    assert deadline.due_at == deadline.breach_start + DELAY


def _heartbeat_timeouts(history: WorkflowHistory) -> set[timedelta]:
    return {e.activity_task_scheduled_event_attributes.heartbeat_timeout.ToTimedelta() for e in history.events
            if e.HasField("activity_task_scheduled_event_attributes")}


def _decided_on(calls: list[str]) -> list[str]:
    """For each termination, the read it was decided on (the last observe before it)."""
    reads = []
    for index, call in enumerate(calls):
        if call == "terminate":
            reads.append(next(c for c in reversed(calls[:index]) if c.startswith("observe")))
    return reads


async def test_a_termination_is_never_decided_on_the_watch_cache_alone(client: Client) -> None:
    """Routine rounds read the cache (versioned nudges). A breach whose deadline passes is confirmed on a fresh read
    from the apiserver before anything is deleted; a cache that lags (it still shows the breach the cluster has
    healed) deletes nothing."""
    cluster = ScriptedCluster(_pcs("cached"))
    worker, handle = await _run(client, cluster)
    async with worker:
        await _until(handle, lambda s: s.phase is Phase.AVAILABLE)
        cluster.ready = 1
        await handle.signal(contract.NUDGE_SIGNAL, Nudge(sent_at=datetime.now(UTC)))
        await _until(handle, lambda s: bool(s.deadlines))
        await _until(handle, lambda s: s.terminations_total == 1, timeout=DELAY.total_seconds() + 15)
        assert "observe (cache)" in cluster.calls, "the routine rounds read the cache"
        assert _decided_on(cluster.calls) == ["observe"], f"decided on a cached read: {cluster.calls}"
        await _until(handle, lambda s: s.phase is Phase.AVAILABLE)  # the new incarnation, seen available

        # Breach again; the cluster heals before the deadline, but the cache never hears of it.
        cluster.ready = 1
        await handle.signal(contract.NUDGE_SIGNAL, Nudge(sent_at=datetime.now(UTC)))
        await _until(handle, lambda s: bool(s.deadlines))
        cluster.cache_ready, cluster.ready = 1, 2
        await asyncio.sleep(DELAY.total_seconds() + 2)
        assert len(cluster.terminated) == 1, f"terminated on what only the lagging cache said: {cluster.calls}"
        assert not (await _status(handle)).deadlines, "the fresh read healed the breach"


async def test_pause_holds_an_expired_breach_and_resume_acts_on_it_at_once(client: Client) -> None:
    cluster = ScriptedCluster(_pcs("paused"))
    worker, handle = await _run(client, cluster)
    async with worker:
        await _until(handle, lambda s: s.phase is Phase.AVAILABLE)
        result = await handle.execute_update(contract.PAUSE, PauseRequest(reason="maintenance"),
                                             result_type=ControlResult)
        assert result.accepted
        await _breach(cluster, handle)
        await _until(handle, lambda s: bool(s.deadlines))
        await asyncio.sleep(DELAY.total_seconds() + 1.5)
        assert cluster.terminated == [], "paused: nothing is terminated, even past the deadline"
        resumed_at = datetime.now(UTC)
        await handle.execute_update(contract.RESUME, result_type=ControlResult)
        await _until(handle, lambda s: s.terminations_total == 1, timeout=10)
        (at, _), = cluster.terminated
        assert at - resumed_at < timedelta(seconds=5), "acted on at once, not after another delay"


async def test_force_terminate_names_a_missing_scaling_group_and_changes_nothing(client: Client) -> None:
    cluster = ScriptedCluster(_pcs("forced"))
    worker, handle = await _run(client, cluster)
    async with worker:
        await _until(handle, lambda s: s.phase is Phase.AVAILABLE)
        with pytest.raises(WorkflowUpdateFailedError) as rejected:
            await handle.execute_update(contract.FORCE_TERMINATE, ForceTerminateRequest(scaling_group="nope"),
                                        result_type=ControlResult)
        assert "nope" in str(rejected.value.cause)
        assert cluster.terminated == [] and (await _status(handle)).terminations_total == 0
        result = await handle.execute_update(contract.FORCE_TERMINATE, ForceTerminateRequest(reason="bad GPU"),
                                             result_type=ControlResult)
        assert result.accepted and result.termination is not None and result.termination.forced
        (_, request), = cluster.terminated
        assert request.forced and "bad GPU" in request.reason


async def test_a_run_hands_over_once_its_history_reaches_the_cap_and_carries_its_state(
        client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """A replay after a worker restart costs time per history event, so a run stops growing at
    HISTORY_EVENTS_PER_RUN (lowered here so a few nudged rounds reach it)."""
    from workflows import signals
    cap = 60
    monkeypatch.setattr(signals, "HISTORY_EVENTS_PER_RUN", cap)
    monkeypatch.setattr(signals, "QUIET_HISTORY_EVENTS", 10 * cap)  # the cap alone (the nudged rounds are quiet)
    cluster = ScriptedCluster(_pcs("capped"))
    worker, handle = await _run(client, cluster)
    async with worker:
        await _until(handle, lambda s: s.phase is Phase.AVAILABLE)
        first_run = (await handle.describe()).run_id
        for _ in range(40):
            await handle.signal(contract.NUDGE_SIGNAL, Nudge(sent_at=datetime.now(UTC)))
            await asyncio.sleep(0.05)
            if (await _status(handle)).runs > 1:
                break
        await _until(handle, lambda s: s.runs > 1 and s.phase is Phase.AVAILABLE)
        history = await client.get_workflow_handle(handle.id, run_id=first_run).fetch_history()
        assert history.events[-1].HasField("workflow_execution_continued_as_new_event_attributes")
        assert cap < len(history.events) < cap + 40, len(history.events)
        assert signals.HISTORY_CAP_PATCH in patches_in(list(history.events)), "patch-guarded"
        status = await _status(handle)
        assert status.nudges_total >= 1 and status.terminations_total == 0


async def test_a_podclique_the_watcher_saw_reach_min_available_between_two_reads_breaches_when_it_falls_short(
        dev_server: TemporalDevServer) -> None:
    """The watcher held back the nudge for the Ready that brought a PodClique to its minAvailable, and that Ready was
    lost before any round read it: every read shows the PodClique short, as if it had never been available. The
    crossing rides with the nudges (Nudge.reached), so the loss is a breach, terminated after its delay. A report
    naming another incarnation of the PodClique sets nothing."""
    client = await Client.connect(dev_server.address, data_converter=pydantic_data_converter,
                                  interceptors=[NudgeVersionsInterceptor()])
    cluster = ScriptedCluster(_pcs("reached"))
    cluster.ready = 1  # of minAvailable 2, in every read
    name = cluster.topology.cliques[0].name
    worker, handle = await _run(client, cluster)

    async def nudge(reached: dict[str, str]) -> None:
        calls = len(cluster.calls)
        with nudge_versions.sending(None, reached):
            await handle.signal(contract.NUDGE_SIGNAL, Nudge(sent_at=datetime.now(UTC)))
        await _until(handle, lambda s: len(cluster.calls) > calls)  # the round it calls for has read

    async with worker:
        await _until(handle, lambda s: s.phase is Phase.STARTING)
        await nudge({name: f"{name}-0"})  # an incarnation that is not the one the reads show
        await asyncio.sleep(0.5)
        status = await _status(handle)
        assert not status.deadlines and status.phase is Phase.STARTING, "never available: no breach"
        await nudge({name: f"{name}-1"})
        await _until(handle, lambda s: bool(s.deadlines))
        await _until(handle, lambda s: s.terminations_total == 1, timeout=DELAY.total_seconds() + 15)
        (_, request), = cluster.terminated
        assert request.cliques == {name: f"{name}-1"}
        assert "BreachDetected" in cluster.events
    history = await _first_run(client, handle).fetch_history()
    signalled = [e.workflow_execution_signaled_event_attributes for e in history.events
                 if e.HasField("workflow_execution_signaled_event_attributes")]
    assert sum(contract.NUDGE_REACHED_HEADER in s.header.fields for s in signalled) == 2, "recorded with the signal"
    await replayer().replay_workflow(history)  # a replay reads the header back, as the worker did


async def test_a_quiet_run_past_the_threshold_hands_over_and_a_breach_counting_down_is_never_split(
        dev_server: TemporalDevServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cold worker replays a replica's whole run, so a run that has grown past QUIET_HISTORY_EVENTS (lowered here)
    hands over once it is quiet, and not while a breach counts down: the breach and how it ended stay in one run.
    Nudges carry versions, as the watcher's do, so routine rounds read the watch cache."""
    from workflows import signals
    threshold = 40
    monkeypatch.setattr(signals, "QUIET_HISTORY_EVENTS", threshold)
    client = await Client.connect(dev_server.address, data_converter=pydantic_data_converter,
                                  interceptors=[NudgeVersionsInterceptor()])
    manifest = _pcs("quiet").model_dump(by_alias=True, exclude_none=True)
    manifest["spec"]["template"]["terminationDelay"] = "120s"
    cluster = ScriptedCluster(PodCliqueSet.model_validate(manifest))
    version = iter(range(100, 10_000))

    async def nudge() -> None:
        with nudge_versions.sending({"Pod": next(version)}):
            await handle.signal(contract.NUDGE_SIGNAL, Nudge(sent_at=datetime.now(UTC)))

    worker, handle = await _run(client, cluster)
    async with worker:
        await _until(handle, lambda s: s.phase is Phase.AVAILABLE)
        first_run = (await handle.describe()).run_id
        cluster.ready = 1
        await nudge()
        await _until(handle, lambda s: s.phase is Phase.BREACHED)
        first = client.get_workflow_handle(handle.id, run_id=first_run)
        while len((await first.fetch_history()).events) <= threshold + 10:
            await nudge()
            await asyncio.sleep(0.1)
        await asyncio.sleep(1)
        status = await _status(handle)
        assert status.runs == 1 and status.phase is Phase.BREACHED, "no hand-over while the breach counts down"

        cluster.ready = 2  # healed
        await nudge()
        await _until(handle, lambda s: s.runs == 2 and s.phase is Phase.AVAILABLE)
        history = await first.fetch_history()
        events = list(history.events)
        assert events[-1].HasField("workflow_execution_continued_as_new_event_attributes")
        assert signals.QUIET_HANDOVER_PATCH in patches_in(events), "patch-guarded"
        await replayer().replay_workflow(history)  # kept as a replay fixture: quiet_handover.json
        await asyncio.sleep(1)
        status = await _status(handle)
        assert status.runs == 2, "the new run is short: it does not hand over again"
        assert status.terminations_total == 0 and not status.deadlines
        second = await client.get_workflow_handle(handle.id).fetch_history()
        assert len(second.events) < threshold, len(second.events)
        assert "observe" not in cluster.calls[-2:], f"the rounds read the cache: {cluster.calls}"


async def test_a_run_that_last_read_the_apiserver_hands_its_next_run_a_first_read_from_the_apiserver(
        client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nudges without versions: every round reads the apiserver, while the watch cache lags (it still shows a pod
    short). The quiet hand-over's next run must not start on that cache: it would see a breach already gone."""
    from workflows import signals
    monkeypatch.setattr(signals, "QUIET_HISTORY_EVENTS", 30)
    cluster = ScriptedCluster(_pcs("freshcarry"))
    worker, handle = await _run(client, cluster)
    async with worker:
        await _until(handle, lambda s: s.phase is Phase.AVAILABLE)
        cluster.cache_ready = 1
        while (await _status(handle)).runs == 1:
            await handle.signal(contract.NUDGE_SIGNAL, Nudge(sent_at=datetime.now(UTC)))
            await asyncio.sleep(0.2)
        await asyncio.sleep(1)
        status = await _status(handle)
        second = await client.get_workflow_handle(handle.id).fetch_history()
    assert status.phase is Phase.AVAILABLE and not status.deadlines, status
    reads = [name for name in activity_names(list(second.events))
             if name in (contract.OBSERVE_REPLICA, contract.OBSERVE_REPLICA_CACHED)]
    assert reads[:1] == [contract.OBSERVE_REPLICA], f"the next run's first read: {reads}"


async def test_a_run_never_hands_over_in_the_workflow_task_that_accepted_an_update(client: Client) -> None:
    """A task that accepts an update and also continues-as-new is refused whole by the server when a signal comes in
    meanwhile (a storm of them, in practice), and the update goes down with it: the caller gets "workflow task
    failure". So the run hands over in a later task. The task is made here on purpose: while a failing status mirror
    (a local activity, retried within its task) holds the run's task open, nudges and a pause come in; the next task
    holds them all, and the pause spends the run's update budget of one, so the run is to hand over in it."""
    cluster = ScriptedCluster(_pcs("updated"))
    queue = f"mt-{uuid.uuid4().hex[:8]}"
    ref = ReplicaRef(namespace="ns", pcs=cluster.topology.pcs, pcs_uid=uuid.uuid4().hex, replica=0)
    handle = await client.start_workflow(ReplicaWorkflow.run, ReplicaInput(ref=ref, update_limit=1),
                                         id=ref.workflow_id, task_queue=queue)
    first_run = handle.result_run_id
    async with Worker(client, task_queue=queue, workflows=[ReplicaWorkflow], activities=cluster.activities(),
                      activity_executor=_EXECUTOR):
        await _until(handle, lambda s: s.phase is Phase.AVAILABLE)
        cluster.mirror_failures = 2  # retried 1 s and 2 s later, within the task: it stays open about 3 s
        await _breach(cluster, handle)  # a round whose status changes: it mirrors
        while cluster.mirror_failures == 2:
            await asyncio.sleep(0.02)
        for _ in range(3):
            await handle.signal(contract.NUDGE_SIGNAL, Nudge(sent_at=datetime.now(UTC)))
        result = await handle.execute_update(contract.PAUSE, PauseRequest(reason="t"), result_type=ControlResult)
        await _until(handle, lambda s: s.runs > 1)
        paused = (await _status(handle)).paused
    assert result.accepted and result.message == "paused"
    assert paused, "the pause went over to the next run"
    history = await client.get_workflow_handle(ref.workflow_id, run_id=first_run).fetch_history()
    await replayer().replay_workflow(history)  # kept as a replay fixture: update_accepted_then_handover.json
    events = list(history.events)
    assert events[-1].HasField("workflow_execution_continued_as_new_event_attributes")
    accepted = next(i for i, e in enumerate(events) if e.HasField("workflow_execution_update_accepted_event_attributes"))
    completed = [i for i, e in enumerate(events) if e.HasField("workflow_task_completed_event_attributes")]
    accepting_task, handing_over_task = max(i for i in completed if i < accepted), max(completed)
    assert any(e.HasField("workflow_execution_signaled_event_attributes")
               for e in events[max(i for i in completed if i < accepting_task):accepting_task]), \
        "the task that took the update took nudges too (the loop woke in it)"
    assert accepting_task < handing_over_task, "the update was accepted in the task that continued-as-new"
    assert UPDATE_HANDOVER_PATCH in patches_in(events), "patch-guarded"


async def test_every_run_looks_once_before_it_hands_over_even_when_it_starts_past_the_cap(client: Client) -> None:
    """Under an unpaced signal storm a run's first task can already be past a hand-over threshold (e2e: 4,450 events).
    Handing over at once would start the next run in the same state, and runs could follow one another without
    observing: a breach would go unseen. A limit of one history event puts every run's first task past it."""
    cluster = ScriptedCluster(_pcs("stormed"))
    queue = f"mt-{uuid.uuid4().hex[:8]}"
    worker = Worker(client, task_queue=queue, workflows=[ReplicaWorkflow], activities=cluster.activities(),
                    activity_executor=_EXECUTOR)
    ref = ReplicaRef(namespace="ns", pcs=cluster.topology.pcs, pcs_uid=uuid.uuid4().hex, replica=0)
    handle = await client.start_workflow(ReplicaWorkflow.run, ReplicaInput(ref=ref, history_event_limit=1),
                                         id=ref.workflow_id, task_queue=queue)
    async with worker:
        await _until(handle, lambda s: s.runs >= 3)
        await handle.terminate("test over")
    # Follow the chain of runs from the first (not the visibility store, which may lag on a loaded machine).
    run_id = handle.result_run_id
    for _ in range(2):
        history = await client.get_workflow_handle(ref.workflow_id, run_id=run_id).fetch_history()
        last = history.events[-1]
        assert last.HasField("workflow_execution_continued_as_new_event_attributes"), last
        steps = activity_names(list(history.events))
        assert contract.OBSERVE_REPLICA_CACHED in steps or contract.OBSERVE_REPLICA in steps, \
            f"run {run_id} handed over unobserved: {steps}"
        assert ROUND_BEFORE_HANDOVER_PATCH in patches_in(list(history.events)), "patch-guarded"
        run_id = last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id


async def test_a_new_run_records_one_patch_marker_and_runs_routine_steps_as_local_activities(client: Client) -> None:
    """Each patch marker costs two events per run (marker and search attribute upsert): a new run records only the
    baseline, which stands for every earlier patch. Its cached reads, status mirrors and materialising are local
    activities (one marker each); nothing routine is scheduled as an activity."""
    cluster = ScriptedCluster(_pcs("lean"))
    worker, handle = await _run(client, cluster)
    async with worker:
        await _until(handle, lambda s: s.phase is Phase.AVAILABLE)
        history = await _first_run(client, handle).fetch_history()
    events = list(history.events)
    markers = [e.marker_recorded_event_attributes.details["patch-data"] for e in events
               if e.marker_recorded_event_attributes.marker_name == "core_patch"]
    assert len(markers) == 1 and REPLICA_BASELINE_12_PATCH.encode() in markers[0].payloads[0].data
    assert {TIMED_NUDGES_PATCH, NUDGED_FLOOR_PATCH, UNVERSIONED_COUNTED_PATCH,
            contract.LOCAL_ACTIVITIES_PATCH, LOCAL_RELEASES_PATCH, MIRROR_WITH_READ_PATCH,
            LOCAL_ENSURE_PATCH} <= patches_in(events)
    scheduled = [e.activity_task_scheduled_event_attributes.activity_type.name for e in events
                 if e.HasField("activity_task_scheduled_event_attributes")]
    assert not set(scheduled) & (contract.LOCAL_ACTIVITIES | contract.LOCAL_RELEASES | contract.LOCAL_ENSURES), \
        scheduled
    assert {contract.OBSERVE_REPLICA_CACHED, contract.MIRROR_STATUS} <= set(activity_names(events))


def _mirror_markers(history: WorkflowHistory) -> int:
    return sum(1 for e in history.events
               if (local := local_activity(e)) is not None and local.name == contract.MIRROR_STATUS)


async def test_a_read_that_wrote_the_status_leaves_the_round_nothing_to_mirror(client: Client) -> None:
    """The round's read from the cache writes the status the round's evaluation asks for (mirror-with-read): the
    round records no mirror_status of its own, and the history replays. A later round on a fresh read (a nudge without
    versions) mirrors the breach itself."""
    cluster = ScriptedCluster(_pcs("readmirror"))
    cluster.read_mirrors = True
    worker, handle = await _run(client, cluster)
    async with worker:
        await _until(handle, lambda s: s.phase is Phase.AVAILABLE)
        history = await _first_run(client, handle).fetch_history()
        assert _mirror_markers(history) == 0, activity_names(list(history.events))
        assert sorted(cluster.mirrored_by_read) == sorted(u.name for u in cluster.topology.cliques)
        assert cluster.mirrored_by_round == []
        await _breach(cluster, handle)  # a nudge without versions: read from the apiserver, which does not write
        await _until(handle, lambda s: any(c.breached == "True" for c in s.cliques))
        history = await _first_run(client, handle).fetch_history()
        await handle.terminate("test over")
    assert _mirror_markers(history) >= 1 and cluster.mirrored_by_round, "the fresh-read round mirrored itself"
    await replayer().replay_workflow(history)


async def _run_replacing(client: Client, cluster: ScriptedCluster, observe_cached: object,
                         ensure: object) -> tuple[Worker, WorkflowHandle[ReplicaWorkflow, object]]:
    """A replica workflow on the cluster's scripted activities, with the cached read and materialising replaced."""
    scripted = [a for a in cluster.activities() if getattr(a, "__name__", "") not in ("observe_cached", "ensure_releasing")]
    queue = f"mt-{uuid.uuid4().hex[:8]}"
    worker = Worker(client, task_queue=queue, workflows=[ReplicaWorkflow],
                    activities=[*scripted, observe_cached, ensure], activity_executor=_EXECUTOR)
    ref = ReplicaRef(namespace="ns", pcs=cluster.topology.pcs, pcs_uid=uuid.uuid4().hex, replica=0)
    handle = await client.start_workflow(ReplicaWorkflow.run, ReplicaInput(ref=ref, safety_resync=timedelta(hours=6)),
                                         id=ref.workflow_id, task_queue=queue)
    return worker, handle


async def test_materialising_that_wrote_the_status_leaves_the_round_nothing_to_mirror(client: Client) -> None:
    """A new replica's first round: its read finds objects missing, so materialising writes the status the round's
    evaluation asks for, on the snapshot it leaves (mirror-with-ensure): the round records no mirror_status of its
    own, and the history replays."""
    cluster = ScriptedCluster(_pcs("ensuremirror"))
    cluster.read_mirrors = True
    reads: list[str] = []
    by_ensure: list[str] = []

    @activity.defn(name=contract.OBSERVE_REPLICA_CACHED)
    def observe_cached(request: CachedObserveRequest) -> ReplicaSnapshot:
        reads.append("observe")
        found = cluster.snapshot().model_copy(update={"from_cache": True, "read_from": None})
        if len(reads) == 1:  # nothing made yet
            return found.model_copy(update={"drift": ("missing PodClique ensuremirror-0-a",)})
        planned = presentation.mirrors_with_read(request.mirror, found, 0) if request.mirror else None
        return found if planned is None else found.model_copy(update={"mirrored": planned[2]})

    @activity.defn(name=contract.ENSURE_REPLICA_RELEASING)
    def ensure(request: EnsureRequest) -> EnsureResult:
        found = cluster.snapshot()
        planned = presentation.mirrors_with_read(request.mirror, found, 0) if request.mirror else None
        if planned is not None:
            by_ensure.extend(item.name for item in planned[0])
            found = found.model_copy(update={"mirrored": planned[2]})
        return EnsureResult(created=("PodClique/ensuremirror-0-a",), snapshot=found)

    worker, handle = await _run_replacing(client, cluster, observe_cached, ensure)
    async with worker:
        await _until(handle, lambda s: s.phase is Phase.AVAILABLE, timeout=15)
        history = await _first_run(client, handle).fetch_history()
        await handle.terminate("test over")
    assert sorted(by_ensure) == sorted(u.name for u in cluster.topology.cliques), by_ensure
    assert _mirror_markers(history) == 0, activity_names(list(history.events))
    assert MIRROR_WITH_ENSURE_PATCH in patches_in(list(history.events))
    await replayer().replay_workflow(history)


async def test_a_read_whose_writes_differ_from_the_rounds_evaluation_is_mirrored_again(client: Client) -> None:
    """What the read reports it wrote is checked against the round's own evaluation, object by object: where the
    digests differ the round writes its own status (as it would without the read's help)."""
    cluster = ScriptedCluster(_pcs("readmirror-wrong"))
    cluster.read_mirrors = cluster.read_digests_wrong = True
    worker, handle = await _run(client, cluster)
    async with worker:
        await _until(handle, lambda s: s.phase is Phase.AVAILABLE)
        history = await _first_run(client, handle).fetch_history()
        await handle.terminate("test over")
    assert _mirror_markers(history) == 1
    assert sorted(cluster.mirrored_by_round) == sorted(cluster.mirrored_by_read) != []
    await replayer().replay_workflow(history)


async def test_a_failing_local_activity_retries_on_a_timer_and_queries_are_answered_meanwhile(client: Client) -> None:
    """A local activity holds its workflow task open while it retries within the threshold, and a query waits for the
    SDK's workflow-task heartbeat meanwhile (7 s measured). Past 2 s of back-off the retry waits on a workflow timer,
    with the task closed: the status query is answered while kube-apiserver is down."""
    cluster = ScriptedCluster(_pcs("retrying"))
    worker, handle = await _run(client, cluster)
    async with worker:
        await _until(handle, lambda s: s.phase is Phase.AVAILABLE)
        mark = len((await _first_run(client, handle).fetch_history()).events)
        cluster.mirror_failures = 4  # attempts 1-3 within the threshold (1 s, 2 s apart), the 4th 4 s later: on a timer
        await _breach(cluster, handle)
        answered = []
        while cluster.mirror_failures > 0:
            answered.append(await handle.query(contract.STATUS_QUERY, result_type=ReplicaStatus,
                                               rpc_timeout=timedelta(seconds=5)))
            await asyncio.sleep(0.5)
        await _until(handle, lambda s: s.terminations_total == 1, timeout=30)
        # the run that took the breach (once quiet again past QUIET_HISTORY_EVENTS, the replica hands over)
        history = await _first_run(client, handle).fetch_history()
    mirrors = [local for e in list(history.events)[mark:]
               if (local := local_activity(e)) is not None and local.name == contract.MIRROR_STATUS]
    assert [m.attempt for m in mirrors if m.result is None] == [3, 4], "from the third on, back-off on a timer"
    assert [m.attempt for m in mirrors if m.result is not None][0] == 5, "the fifth attempt went through"
    assert answered, "every query was answered within 5 s while the mirror kept failing"


def _timers(history: WorkflowHistory) -> tuple[int, int]:
    started = sum(e.HasField("timer_started_event_attributes") for e in history.events)
    return started, sum(e.HasField("timer_canceled_event_attributes") for e in history.events)


async def test_rounds_woken_by_nudges_share_one_safety_timer(client: Client) -> None:
    """A wait with no deadline is bounded by the safety resync alone. One timer runs across such waits: a round woken
    by a nudge starts and cancels none (two history events less per round)."""
    cluster = ScriptedCluster(_pcs("resync"))
    worker, handle = await _run(client, cluster)
    async with worker:
        await _until(handle, lambda s: s.phase is Phase.AVAILABLE)
        for _ in range(5):
            reads = len(cluster.calls)
            await handle.signal(contract.NUDGE_SIGNAL, Nudge(sent_at=datetime.now(UTC)))
            await _until(handle, lambda s, reads=reads: len(cluster.calls) > reads)  # type: ignore[misc]
        history = await _first_run(client, handle).fetch_history()  # where the nudged rounds ran (then it may hand over)
    assert len([c for c in cluster.calls if c.startswith("observe")]) >= 6
    assert _timers(history) == (1, 0), "a timer per wait, cancelled by each nudge"


async def test_the_safety_resync_looks_again_without_any_nudge(client: Client) -> None:
    cluster = ScriptedCluster(_pcs("resync-idle"))
    worker, handle = await _run(client, cluster, safety_resync=timedelta(seconds=1))
    async with worker:
        await _until(handle, lambda s: s.phase is Phase.AVAILABLE)
        reads = len(cluster.calls)
        await asyncio.sleep(4.5)
        looks = len(cluster.calls) - reads
        runs = await run_histories(client, handle.id)  # quiet past QUIET_HISTORY_EVENTS, a run hands over
    assert looks >= 3, f"{looks} reads in 4.5 s with a 1 s safety resync"
    started, cancelled = (sum(counts) for counts in zip(*map(_timers, runs), strict=True))
    assert cancelled == 0 and started >= looks, (started, cancelled)


def _heartbeat_tasks(history: WorkflowHistory) -> int:
    """Workflow tasks completed with no command and followed at once by another: the SDK's heartbeat while a local
    activity outlasts its task."""
    events = list(history.events)
    return sum(1 for e, after in zip(events, events[1:], strict=False)
               if e.HasField("workflow_task_completed_event_attributes")
               and after.HasField("workflow_task_scheduled_event_attributes"))


async def test_a_deadline_passing_while_a_local_activity_outlasts_its_task_replays(client: Client) -> None:
    """Fault run seed 13 on b8a0e27 (tests/fixtures/incidents/README.md): a replay runs a task followed by local
    activity heartbeats at another workflow time than the first execution did, so a deadline judged by workflow time
    was due in one and not in the other. Judged by its fired timer, the history replays whatever the timing. (The
    scripted nudges here have no versions, so the rounds they wake read the apiserver; the round the deadline's timer
    wakes reads the cache, slowly. This did not reproduce the failure on the old path in three tries: the timing
    is the fault runs'. It checks that such a history replays and that no termination comes early.)"""
    cluster = ScriptedCluster(_pcs("slowcache"))
    worker, handle = await _run(client, cluster, task_timeout=timedelta(seconds=2))  # heartbeat after about 1.6 s
    async with worker:
        await _until(handle, lambda s: s.phase is Phase.AVAILABLE)
        cluster.cache_delay = 2.5  # each cached read outlasts its workflow task; the deadline passes during one
        await _breach(cluster, handle)
        await _until(handle, lambda s: s.terminations_total == 1, timeout=30)
        await _until(handle, lambda s: s.phase is Phase.AVAILABLE, timeout=30)
        history = await _first_run(client, handle).fetch_history()
    assert _heartbeat_tasks(history) >= 2, "no local activity outlasted its workflow task: the test proves nothing"
    (at, request), = cluster.terminated
    assert at >= request.deadline, "terminated before its deadline"
    result = await replayer().replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure


async def test_a_hand_over_after_a_local_activity_that_outlasts_its_task_replays(
        dev_server: TemporalDevServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fault run seed 4 (tests/fixtures/incidents/README.md): a closed run no longer replayed because its quiet
    hand-over was judged on the history length the workflow task reported, and a local activity that outlasts its task
    moves task boundaries between the first execution and a replay. Here the round's read outlasts its 2 s task (a
    heartbeat task follows) and the threshold is crossed by that round: the run hands over in the first execution and
    its replay agrees, because it judges by the length it counts (COUNTED_EVENTS_RULE)."""
    from workflows import signals
    client = await Client.connect(dev_server.address, data_converter=pydantic_data_converter,
                                  interceptors=[NudgeVersionsInterceptor()])
    cluster = ScriptedCluster(_pcs("slowquiet"))
    worker, handle = await _run(client, cluster, task_timeout=timedelta(seconds=2))
    async with worker:
        await _until(handle, lambda s: s.phase is Phase.AVAILABLE)
        await asyncio.sleep(1)
        first = _first_run(client, handle)
        counted = (await _status(handle)).history_events_counted
        # The nudge's own events (EVENTS_PER_SIGNAL) do not cross it; the round's local activities do.
        monkeypatch.setattr(signals, "QUIET_HISTORY_EVENTS", counted + signals.EVENTS_PER_SIGNAL)
        cluster.cache_delay = 2.5  # outlasts the 2 s task: the SDK heartbeats after about 1.6 s
        with nudge_versions.sending({"Pod": 100}):  # a versioned nudge: the round reads the cache, locally
            await handle.signal(contract.NUDGE_SIGNAL, Nudge(sent_at=datetime.now(UTC)))
        await _until(handle, lambda s: s.runs == 2)
        cluster.cache_delay = 0.0
        history = await first.fetch_history()
        await handle.terminate("test over")
    assert _heartbeat_tasks(history) >= 1, "the read did not outlast its workflow task: the test proves nothing"
    assert history.events[-1].HasField("workflow_execution_continued_as_new_event_attributes")
    assert signals.QUIET_HANDOVER_PATCH in patches_in(list(history.events))
    result = await replayer().replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure


async def test_the_counted_history_length_stays_near_the_real_one(
        dev_server: TemporalDevServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hand-overs are judged on the length a run counts (COUNTED_EVENTS_RULE): through a rollout-free life of nudged
    rounds, some reading the apiserver and some the cache, a breach and its healing, the count stays within a quarter
    of the history Temporal holds, so QUIET_HISTORY_EVENTS and history_event_limit keep their meaning."""
    client = await Client.connect(dev_server.address, data_converter=pydantic_data_converter,
                                  interceptors=[NudgeVersionsInterceptor()])
    cluster = ScriptedCluster(_pcs("counted"))
    version = iter(range(100, 10_000))
    worker, handle = await _run(client, cluster)
    compared: list[tuple[int, int]] = []
    async with worker:
        await _until(handle, lambda s: s.phase is Phase.AVAILABLE)
        first = _first_run(client, handle)
        for step in range(12):
            if step == 4:
                cluster.ready = 1
            if step == 7:
                cluster.ready = 2
            if step % 3:
                with nudge_versions.sending({"Pod": next(version)}):
                    await handle.signal(contract.NUDGE_SIGNAL, Nudge(sent_at=datetime.now(UTC)))
            else:
                await handle.signal(contract.NUDGE_SIGNAL, Nudge(sent_at=datetime.now(UTC)))
            await asyncio.sleep(0.5)
            status = await _status(handle)
            if status.runs > 1:
                break
            compared.append((status.history_events_counted, len((await first.fetch_history()).events)))
        await handle.terminate("test over")
    assert len(compared) >= 6, compared
    for counted, real in compared:
        assert abs(counted - real) <= max(6, real // 4), compared


async def test_a_round_goes_on_with_the_plan_materialising_read_when_the_spec_changed_between_the_reads(
        client: Client) -> None:
    """The round's read plans a PodClique more than materialising's own read a moment later (an HPA scaled back in
    between): the round evaluates on the plan the objects were made to and ends Available. On the older plan it
    waited for a PodClique never made, phase Creating, with nothing left to wake it (fault run seed 7, CI)."""
    cluster = ScriptedCluster(_pcs("rescaled"))
    wider = _pcs("rescaled")
    wider.spec.template.cliques.append(wider.spec.template.cliques[0].model_copy(update={"name": "extra"}))
    first_read = cluster.snapshot().model_copy(update={
        "topology": topology_for(wider, 0), "drift": ("missing PodClique rescaled-0-extra",)})
    reads: list[str] = []

    @activity.defn(name=contract.OBSERVE_REPLICA_CACHED)
    def observe_cached(request: CachedObserveRequest) -> ReplicaSnapshot:
        reads.append("observe")
        return (first_read if len(reads) == 1 else cluster.snapshot()).model_copy(
            update={"from_cache": True, "read_from": None})

    @activity.defn(name=contract.ENSURE_REPLICA_RELEASING)
    def ensure(request: EnsureRequest) -> EnsureResult:
        reads.append("ensure")
        return EnsureResult(snapshot=cluster.snapshot())  # its own read: the narrower plan, nothing to make

    worker, handle = await _run_replacing(client, cluster, observe_cached, ensure)
    async with worker:
        await _until(handle, lambda s: s.phase is Phase.AVAILABLE, timeout=15)
        status = await _status(handle)
        history = await _first_run(client, handle).fetch_history()
    assert reads[:2] == ["observe", "ensure"], reads
    locals_recorded = [local.name for e in history.events if (local := local_activity(e)) is not None]
    assert contract.ENSURE_REPLICA_RELEASING in locals_recorded, "materialising ran as a local activity (local-ensure)"
    assert contract.ENSURE_REPLICA_RELEASING not in [
        e.activity_task_scheduled_event_attributes.activity_type.name for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")]
    assert {c.name for c in status.cliques} == {unit.name for unit in cluster.topology.cliques}


class _SurplusAndScaledCluster(ScriptedCluster):
    """A base PodClique with a pod past its minAvailable and a scaled gang, both gated; the base gang scheduled."""

    def __init__(self) -> None:
        super().__init__(PodCliqueSet.model_validate({
            "apiVersion": "grove.io/v1alpha1", "kind": "PodCliqueSet",
            "metadata": {"name": "surplus", "namespace": "ns", "uid": "uid-1"},
            "spec": {"replicas": 1, "template": {
                "cliques": [
                    {"name": "fe", "spec": {"roleName": "fe", "replicas": 3, "minAvailable": 2,
                                            "podSpec": {"containers": [{"name": "c", "image": "i"}]}}},
                    {"name": "w", "spec": {"roleName": "w", "replicas": 1, "minAvailable": 1,
                                           "podSpec": {"containers": [{"name": "c", "image": "i"}]}}}],
                "podCliqueScalingGroups": [{"name": "sg", "cliqueNames": ["w"], "replicas": 2, "minAvailable": 1}],
            }},
        }))
        self.gated = {unit.name: names.pod_name(unit.name, 2 if unit.scaling_group is None else 0)
                      for unit in self.topology.cliques
                      if unit.scaling_group is None or unit.scaling_group_replica >= 1}
        self.releases: list[ReleaseRequest] = []

    def snapshot(self, ready: int | None = None) -> ReplicaSnapshot:
        now = datetime.now(UTC)
        cliques = {}
        for unit in self.topology.cliques:
            pods = 3 if unit.scaling_group is None else 1
            with self._lock:
                gated = unit.name in self.gated
            cliques[unit.name] = CliqueState(
                uid=unit.name, pods=pods, ready=pods - gated, scheduled=pods - gated, gated=int(gated),
                releasable={self.gated[unit.name]: f"uid-{unit.name}"} if gated else {})
        return ReplicaSnapshot(read_at=now, read_from=now, pcs_state=PcsState.PRESENT, wanted_replicas=1,
                               topology=self.topology, cliques=cliques)

    def release(self, request: ReleaseRequest) -> ReleaseResult:
        pods = {**request.pods, **request.base}
        with self._lock:
            self.releases.append(request)
            self.gated = {pclq: pod for pclq, pod in self.gated.items() if pod not in pods}
        return ReleaseResult(released=tuple(pods), released_uids=pods)


async def test_surplus_base_pods_and_scaled_gangs_go_in_one_release_scaled_first(client: Client) -> None:
    """Once the base gang is scheduled, the base PodClique's pod past minAvailable and the scaled gang's pods are
    released by one release_gates (one marker), the scaled gang named first: the activity removes those gates
    before the surplus pod's, so the surplus pod's binding wakes no round (worker/watcher.py)."""
    cluster = _SurplusAndScaledCluster()
    worker, handle = await _run(client, cluster)
    async with worker:
        await _until(handle, lambda s: bool(cluster.releases))
        await handle.signal(contract.NUDGE_SIGNAL, Nudge(sent_at=datetime.now(UTC)))  # the watcher's, on the bindings
        await _until(handle, lambda s: s.phase is Phase.AVAILABLE)
    ((request,),) = [cluster.releases]
    fe, scaled = (f"{cluster.topology.pcs}-0-fe", f"{cluster.topology.pcs}-0-sg-1-w")
    assert (request.gang_kind, request.pods, request.base) == (
        "scaled", {names.pod_name(scaled, 0): f"uid-{scaled}"}, {names.pod_name(fe, 2): f"uid-{fe}"})
    assert request.base_requires == {f"{cluster.topology.pcs}-0-fe": 2, f"{cluster.topology.pcs}-0-sg-0-w": 1}
    history = await _first_run(client, handle).fetch_history()
    releases = [e for e in history.events if (la := local_activity(e)) is not None and la.name == contract.RELEASE_GATES]
    assert len(releases) == 1
