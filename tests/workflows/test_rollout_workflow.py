"""The rollout workflow on the real Temporal dev server, with stub activities and stub replica workflows: the turn
order, retargeting, halting and pause/resume, faster than the whole stack can show them (it fakes neither Temporal
nor Kubernetes: Kubernetes is not involved, the snapshots are the test's script)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio import activity, workflow
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

from grove.rollout import ReplicaRollout
from localstack.temporal import TemporalDevServer
from workflows.contract import (
    ACTIVITY_HEARTBEAT_TIMEOUT,
    MIRROR_ROLLOUT_STATUS,
    OBSERVE_ROLLOUT,
    OBSERVE_ROLLOUT_CACHED,
    PCS_CHANGED_SIGNAL,
    RECORD_ROLLOUT_EVENT,
    ROLLOUT_REPORT_SIGNAL,
    ROLLOUT_TURN_SIGNAL,
    replica_workflow_id,
)
from workflows.rollout import RESYNC_CACHED_PATCH, RolloutWorkflow
from workflows.rollout_messages import (
    PcsRef,
    RolloutControl,
    RolloutControlResult,
    RolloutEvent,
    RolloutInput,
    RolloutSnapshot,
    RolloutStatus,
    RolloutStatusMirror,
    RolloutTurn,
    TurnReport,
)

REF = PcsRef(namespace="ns", pcs="p", pcs_uid="uid-1")
# A dev server of its own (no Kubernetes needed): marked like the stack tests, since it runs a real server binary.
pytestmark = pytest.mark.stack


@workflow.defn(name="ReplicaWorkflow")
class StubReplica:
    """Stands in for a replica workflow: records the turns it is granted."""

    def __init__(self) -> None:
        self.turns: list[RolloutTurn] = []

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.signal(name=ROLLOUT_TURN_SIGNAL)
    def turn(self, turn: RolloutTurn) -> None:
        self.turns.append(turn)

    @workflow.query(name="turns")
    def granted(self) -> list[RolloutTurn]:
        return self.turns


class Script:
    def __init__(self) -> None:
        self.snapshot = RolloutSnapshot(pcs_state="Present")
        self.mirrors: list[RolloutStatusMirror] = []
        self.events: list[RolloutEvent] = []
        self.reads: list[str] = []  # which observe each round called

    def set(self, generation: str, replicas: list[tuple[bool, bool, bool]]) -> None:
        """replicas: (updated, available, outdated) per index."""
        self.snapshot = RolloutSnapshot(
            pcs_state="Present", valid=True, generation_hash=generation, wanted_replicas=len(replicas),
            replicas=tuple(ReplicaRollout(index=i, updated=u, available=a, outdated=o)
                           for i, (u, a, o) in enumerate(replicas)))

    def activities(self) -> list[Callable[..., Any]]:
        @activity.defn(name=OBSERVE_ROLLOUT)
        async def observe(ref: PcsRef) -> RolloutSnapshot:
            self.reads.append("apiserver")
            return self.snapshot

        @activity.defn(name=OBSERVE_ROLLOUT_CACHED)
        async def observe_cached(ref: PcsRef) -> RolloutSnapshot:
            self.reads.append("cache")
            return self.snapshot

        @activity.defn(name=MIRROR_ROLLOUT_STATUS)
        async def mirror(request: RolloutStatusMirror) -> bool:
            self.mirrors.append(request)
            return True

        @activity.defn(name=RECORD_ROLLOUT_EVENT)
        async def event(request: RolloutEvent) -> None:
            self.events.append(request)

        return [observe, observe_cached, mirror, event]


@pytest.fixture
async def env(dev_server: TemporalDevServer) -> AsyncIterator[tuple[Client, Script, str]]:
    temporal_client = await Client.connect(dev_server.address, data_converter=pydantic_data_converter)
    script = Script()
    queue = f"rollout-test-{uuid.uuid4().hex[:8]}"
    async with Worker(temporal_client, task_queue=queue, workflows=[RolloutWorkflow, StubReplica],
                      activities=script.activities()):
        yield temporal_client, script, queue


async def start(client: Client, queue: str, ref: PcsRef, replicas: int,
                idle_resync: timedelta = timedelta(minutes=10),
                active_resync: timedelta = timedelta(seconds=30)) -> WorkflowHandle[Any, Any]:
    for i in range(replicas):
        await client.start_workflow(StubReplica.run, id=replica_workflow_id(ref.namespace, ref.pcs, ref.pcs_uid, i),
                                    task_queue=queue)
    return await client.start_workflow(RolloutWorkflow.run, RolloutInput(ref=ref, idle_resync=idle_resync,
                                                                         active_resync=active_resync),
                                       id=f"rollout-{uuid.uuid4().hex}", task_queue=queue)


async def rolling(client: Client, script: Script, queue: str, replicas: int) -> tuple[PcsRef, WorkflowHandle[Any, Any]]:
    """A rollout workflow idle at generation g1, then told of g2 (every replica outdated and available)."""
    ref = REF.model_copy(update={"pcs_uid": uuid.uuid4().hex})
    script.set("g1", [(True, True, False)] * replicas)
    handle = await start(client, queue, ref, replicas)
    await until(lambda: _phase(handle, "Idle"), "idle")
    script.set("g2", [(False, True, True)] * replicas)
    await handle.signal(PCS_CHANGED_SIGNAL)
    return ref, handle


async def turns(client: Client, ref: PcsRef, replica: int) -> list[RolloutTurn]:
    handle = client.get_workflow_handle(replica_workflow_id(ref.namespace, ref.pcs, ref.pcs_uid, replica))
    return await handle.query("turns", result_type=list[RolloutTurn])


async def until(check: Callable[[], Any], what: str, timeout: float = 20) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        result = await check()
        if result:
            return result
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


async def two_cached_rounds_after_a_fresh_one(script: Script, kind: str) -> None:
    """Wait for two rounds read from the watch cache; the run's first read the apiserver, and none since did."""
    async def cached_rounds() -> bool:
        return script.reads.count("cache") >= 2

    await until(cached_rounds, f"two {kind} rounds")
    assert script.reads[0] == "apiserver", "a run's first round reads the apiserver"
    assert set(script.reads[1:]) == {"cache"}, script.reads


async def status(handle: WorkflowHandle[Any, Any]) -> RolloutStatus:
    return await handle.query("status", result_type=RolloutStatus)


def report(replica: int, turn: RolloutTurn, outcome: str = "done", message: str = "") -> TurnReport:
    return TurnReport(replica=replica, seq=turn.seq, generation_hash=turn.generation_hash, outcome=outcome,
                      message=message, at=datetime.now(UTC))


async def test_turns_go_one_replica_at_a_time_unavailable_first(env: tuple[Client, Script, str]) -> None:
    client, script, queue = env
    ref = REF.model_copy(update={"pcs_uid": uuid.uuid4().hex})
    script.set("g1", [(True, True, False)] * 3)
    handle = await start(client, queue, ref, 3)
    await until(lambda: _phase(handle, "Idle"), "adopted generation g1")

    async def mirrored() -> bool:
        return bool(script.mirrors)

    await until(mirrored, "first mirror")
    assert script.mirrors[-1].generation_hash == "g1" and script.mirrors[-1].condition_reason == "UpdateComplete"

    script.set("g2", [(False, True, True), (False, True, True), (False, False, True)])
    await handle.signal(PCS_CHANGED_SIGNAL)
    first = (await until(lambda: turns(client, ref, 2), "replica 2 (unavailable) first"))[0]
    assert first.generation_hash == "g2" and await turns(client, ref, 0) == []
    assert (await status(handle)).current == 2
    # while replica 2 is not done, nobody else gets a turn
    await handle.signal(PCS_CHANGED_SIGNAL)
    await asyncio.sleep(1)
    assert await turns(client, ref, 0) == [] and await turns(client, ref, 1) == []

    script.set("g2", [(False, True, True), (False, True, True), (True, True, False)])
    await handle.signal(ROLLOUT_REPORT_SIGNAL, report(2, first))
    turn0 = (await until(lambda: turns(client, ref, 0), "then replica 0"))[0]
    script.set("g2", [(True, True, False), (False, True, True), (True, True, False)])
    await handle.signal(ROLLOUT_REPORT_SIGNAL, report(0, turn0))
    turn1 = (await until(lambda: turns(client, ref, 1), "then replica 1"))[0]
    script.set("g2", [(True, True, False)] * 3)
    await handle.signal(ROLLOUT_REPORT_SIGNAL, report(1, turn1))
    done = await until(lambda: _phase(handle, "Complete"), "complete")
    assert done.updated_replicas == 3 and done.ended_at is not None

    async def mirrored_end() -> bool:
        return bool(script.mirrors and script.mirrors[-1].updated_replicas == 3)

    await until(mirrored_end, "the end mirrored")
    assert [e.reason for e in script.events] == ["RolloutStarted", "RolloutCompleted"]
    assert script.mirrors[-1].condition_reason == "UpdateComplete" and script.mirrors[-1].updated_replicas == 3
    assert script.mirrors[-1].update_progress is not None and "updateEndedAt" in script.mirrors[-1].update_progress
    history = await handle.fetch_history()
    assert {e.activity_task_scheduled_event_attributes.heartbeat_timeout.ToTimedelta() for e in history.events
            if e.HasField("activity_task_scheduled_event_attributes")} == {ACTIVITY_HEARTBEAT_TIMEOUT}, \
        "every activity is retried 20 s after its worker is lost (worker/heartbeats.py)"


async def test_a_change_mid_turn_retargets_the_same_replica(env: tuple[Client, Script, str]) -> None:
    client, script, queue = env
    ref, handle = await rolling(client, script, queue, 2)
    await until(lambda: turns(client, ref, 0), "turn for g2")
    script.set("g3", [(False, True, True)] * 2)
    await handle.signal(PCS_CHANGED_SIGNAL)
    granted = await until(lambda: _at_least(turns(client, ref, 0), 2), "retarget")
    assert [t.generation_hash for t in granted] == ["g2", "g3"] and granted[1].seq > granted[0].seq
    assert await turns(client, ref, 1) == []
    # a late report about the old target is ignored
    await handle.signal(ROLLOUT_REPORT_SIGNAL, report(0, granted[0]))
    await asyncio.sleep(1)
    assert (await status(handle)).current == 0


async def test_a_halt_stops_new_turns_until_resume(env: tuple[Client, Script, str]) -> None:
    client, script, queue = env
    ref, handle = await rolling(client, script, queue, 2)
    turn = (await until(lambda: turns(client, ref, 0), "turn"))[0]
    await handle.signal(ROLLOUT_REPORT_SIGNAL, report(0, turn, "halted", "progressDeadline exceeded by p-0-a"))
    halted = await until(lambda: _phase(handle, "Halted"), "halted")
    assert "p-0-a" in halted.halted

    async def mirrored_halt() -> bool:
        return bool(script.mirrors and script.mirrors[-1].condition_reason == "ProgressDeadlineExceeded")

    await until(mirrored_halt, "the halt mirrored")
    assert script.mirrors[-1].condition_status == "Unknown" and "p-0-a" in script.mirrors[-1].condition_message
    assert [e.reason for e in script.events][-1] == "ProgressDeadlineExceeded"
    await handle.signal(PCS_CHANGED_SIGNAL)
    await asyncio.sleep(1)
    assert len(await turns(client, ref, 0)) == 1 and await turns(client, ref, 1) == []

    result = await handle.execute_update("resume", result_type=RolloutControlResult)
    assert result.accepted and "halt cleared" in result.message
    again = await until(lambda: _at_least(turns(client, ref, 0), 2), "a fresh turn after resume")
    assert again[1].seq > again[0].seq and not again[1].paused
    paused = await handle.execute_update("pause", RolloutControl(reason="maintenance"),
                                         result_type=RolloutControlResult)
    assert paused.accepted
    grants = await until(lambda: _at_least(turns(client, ref, 0), 3), "the replica told it is paused")
    assert grants[2].paused
    assert (await status(handle)).phase == "Paused"


async def test_on_delete_grants_no_turn(env: tuple[Client, Script, str]) -> None:
    client, script, queue = env
    ref = REF.model_copy(update={"pcs_uid": uuid.uuid4().hex})
    script.set("g1", [(True, True, False)])
    handle = await start(client, queue, ref, 1)
    await until(lambda: _phase(handle, "Idle"), "idle")
    script.set("g2", [(False, True, True)])
    script.snapshot = script.snapshot.model_copy(update={"strategy": "OnDelete"})
    await handle.signal(PCS_CHANGED_SIGNAL)
    await until(lambda: _phase(handle, "Complete"), "nothing pending on us")
    assert await turns(client, ref, 0) == []
    assert "OnDelete" in script.mirrors[-1].condition_message


async def _phase(handle: WorkflowHandle[Any, Any], phase: str) -> RolloutStatus | None:
    s = await status(handle)
    return s if s.phase == phase else None


async def _at_least(found: Any, n: int) -> Any:
    items = await found
    return items if len(items) >= n else None


async def test_idle_rounds_read_the_watch_cache_and_a_woken_round_the_apiserver(
        env: tuple[Client, Script, str]) -> None:
    """A settled PCS's periodic re-read costs the apiserver nothing; a change, a report or an active rollout is
    read fresh (the rounds whose decisions grant turns)."""
    client, script, queue = env
    ref = REF.model_copy(update={"pcs_uid": uuid.uuid4().hex})
    script.set("g1", [(True, True, False)] * 2)
    handle = await start(client, queue, ref, 2, idle_resync=timedelta(seconds=1))
    await two_cached_rounds_after_a_fresh_one(script, "idle")
    script.set("g2", [(False, True, True)] * 2)
    seen = len(script.reads)
    await handle.signal(PCS_CHANGED_SIGNAL)
    turn = (await until(lambda: turns(client, ref, 0), "replica 0's turn"))[0]
    await asyncio.sleep(2.5)  # a turn running: no idle round
    after = script.reads[seen:]
    if after[:1] == ["cache"]:  # an idle round the signal met on its way
        after = after[1:]
    assert after and set(after) == {"apiserver"}, script.reads[seen:]
    assert (await status(handle)).current == 0 and turn.generation_hash == "g2"


async def test_a_pcs_still_starting_is_followed_from_the_watch_cache_and_a_turn_granted_on_a_fresh_read(
        env: tuple[Client, Script, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """While its replicas are not updated yet and no turn runs (a new PCS starting), the rollout re-reads the PCS
    every active_resync from the watch cache, not the apiserver (at 1,000 replicas of 17 pods these reads of every
    pod were most of the JSON the worker decoded). A cached read that shows a turn to grant is read again from the
    apiserver, and the turn is granted on that read."""
    client, script, queue = env
    ref = REF.model_copy(update={"pcs_uid": uuid.uuid4().hex})
    script.set("g1", [(False, False, False)] * 2)  # current generation, not available yet: not updated
    handle = await start(client, queue, ref, 2, active_resync=timedelta(seconds=1))
    await two_cached_rounds_after_a_fresh_one(script, "resync")
    assert await turns(client, ref, 0) == [] and await turns(client, ref, 1) == []
    script.set("g2", [(False, True, True)] * 2)  # a new generation the cache shows first (no signal came)
    seen = len(script.reads)
    turn = (await until(lambda: turns(client, ref, 0), "replica 0's turn"))[0]
    assert script.reads[seen:seen + 2] == ["cache", "apiserver"], script.reads[seen:]
    assert turn.generation_hash == "g2" and (await status(handle)).current == 0
    # The new reads are patch-guarded: the history replays on today's code, and not on a path without the patch.
    from tests.histories import replayer

    history = await handle.fetch_history()
    assert (await replayer().replay_workflow(history, raise_on_replay_failure=False)).replay_failure is None
    real = workflow.patched
    monkeypatch.setattr(workflow, "patched", lambda asked: False if asked == RESYNC_CACHED_PATCH else real(asked))
    unguarded = await replayer(sandboxed=False).replay_workflow(history, raise_on_replay_failure=False)
    assert "nondetermin" in str(unguarded.replay_failure).lower(), unguarded.replay_failure
