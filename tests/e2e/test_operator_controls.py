"""S10: operator controls. Pause holds a due termination until resume; force-terminate acts at once and is recorded;
a force-terminate naming something that does not exist is rejected (update: by its validator; signal: recorded in
status.rejected) and changes nothing."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError

from tests.e2e.conftest import Histories
from tests.e2e.harness import Cluster, Replica, Timeline, WorkerProcess, clique, pcs_manifest, wait_for
from workflows.messages import ControlResult, ForceTerminateRequest, PauseRequest, Phase, ReplicaStatus

DELAY_S = 3


def _comparable(status: ReplicaStatus) -> dict:
    return status.model_dump(exclude={"observed_at"})


async def _settled(replica: Replica, *, timeout: float = 30) -> ReplicaStatus:
    """The status once the replica is at rest: it has read (a run that has just handed over shows no PodCliques until
    its first round) and two reads a second apart agree. A replica that was busy when it became Available hands
    over once it is quiet, and its new run's first round changes the status without anything being asked of it."""
    deadline = asyncio.get_running_loop().time() + timeout
    previous = None
    while asyncio.get_running_loop().time() < deadline:
        status = await replica.status()
        if status.cliques and previous is not None and _comparable(status) == _comparable(previous):
            return status
        previous = status
        await asyncio.sleep(1)
    raise AssertionError(f"the replica's status did not settle in {timeout:.0f} s: {previous}")


async def test_pause_resume_and_force_terminate(
        cluster: Cluster, worker_process: WorkerProcess, temporal_client: Client, timeline: Timeline,
        histories: Histories) -> None:
    cluster.apply(pcs_manifest(
        "ctl", cluster.namespace, termination_delay=f"{DELAY_S}s",
        cliques=[clique("frontend", 2, 2), clique("leader", 1, 1)],
        scaling_groups=[{"name": "sg", "replicas": 2, "minAvailable": 1, "cliqueNames": ["leader"]}],
    ))
    wait_for(lambda: cluster.ready_pods(4), timeout=60, what="4 Ready pods")
    replica = Replica(temporal_client, cluster, "ctl")
    handle = replica.handle
    await replica.wait_phase(Phase.AVAILABLE)
    before = cluster.inventory()

    # --- pause holds a due termination ---
    paused = await handle.execute_update("pause", PauseRequest(reason="maintenance window"), result_type=ControlResult)
    assert paused.accepted and paused.message == "paused"
    cluster.fail_readiness("ctl-0-frontend-1")
    deadline = (await replica.wait(lambda s: bool(s.deadlines), what="deadline while paused")).deadlines[0]
    await asyncio.sleep(max(0.0, (deadline.due_at - datetime.now(UTC)).total_seconds()) + 5)
    assert cluster.inventory() == before, "paused: nothing terminated although the deadline passed"
    status = await replica.status()
    assert status.paused and status.pause_reason == "maintenance window"
    assert status.phase is Phase.BREACHED and status.terminations_total == 0
    assert not cluster.events("GangTerminated")
    assert len(status.held) == 1 and "ctl-0-frontend" in status.held[0], status.held
    assert not status.deadlines, f"the expired deadline is due and held, not pending: {status.deadlines}"

    # --- resume acts at once on the expired breach ---
    resumed = await handle.execute_update("resume", result_type=ControlResult)
    resumed_at = time.time()
    assert resumed.accepted and resumed.message == "resumed"
    wait_for(lambda: any("deleting" in m for m in timeline.of("PodClique", "ctl-0-frontend")), timeout=10,
             what="termination right after resume")
    deleting = min(m["deleting"] for m in timeline.of("PodClique", "ctl-0-frontend") if "deleting" in m)
    print(f"\nS10 held {resumed_at - deadline.due_at.timestamp():.1f}s past the deadline while paused; PodCliques "
          f"seen deleting {(deleting - resumed_at) * 1000:.0f} ms after resume")
    assert deleting >= resumed_at - 0.05
    status = await replica.wait(lambda s: s.terminations_total == 1, what="termination recorded")
    assert not status.paused and status.terminations[0].at >= deadline.due_at
    wait_for(lambda: cluster.ready_pods(4), timeout=60, what="replica recreated and Ready")
    await replica.wait_phase(Phase.AVAILABLE)

    # --- force-terminate one PCSG replica (update): at once, with the reason, recorded ---
    before = cluster.inventory()
    asked = time.time()
    result = await handle.execute_update(
        "force_terminate", ForceTerminateRequest(reason="bad GPU on node 7", scaling_group="sg", scaling_group_replica=1),
        result_type=ControlResult,
    )
    took = time.time() - asked
    assert result.accepted and result.termination is not None, result
    record = result.termination
    assert record.forced and record.scope.value == "pcsg-replica"
    assert (record.scaling_group, record.scaling_group_replica, record.cliques) == ("ctl-0-sg", 1, ("ctl-0-sg-1-leader",))
    assert "bad GPU on node 7" in record.reason
    print(f"S10 force-terminate update answered in {took * 1000:.0f} ms")
    after = cluster.inventory()
    # PCSG replica 1 is the scaled gang ctl-0-sg-0 (minAvailable 1): its PodClique and PodGang go, nothing else.
    moved = {k for k, v in before.items() if after.get(k) != v}
    assert moved == {"PodClique/ctl-0-sg-1-leader", "Pod/ctl-0-sg-1-leader-0", "PodGang/ctl-0-sg-0"}, moved
    status = await replica.status()
    assert status.terminations_total == 2 and status.terminations[-1] == record
    events = [e for e in cluster.events("GangTerminated") if "bad GPU on node 7" in e["message"]]
    assert len(events) == 1 and "forced by operator" in events[0]["message"]
    wait_for(lambda: cluster.ready_pods(4), timeout=60, what="PCSG replica recreated")
    await replica.wait_phase(Phase.AVAILABLE)

    # --- force-terminate naming something that does not exist: rejected, nothing changes ---
    before = cluster.inventory()
    status_before = await _settled(replica)
    for request, expected in (
        (ForceTerminateRequest(reason="x", scaling_group="sg", scaling_group_replica=5),
         "PodCliqueScalingGroup 'ctl-0-sg' has replicas 0..1, not 5"),
        (ForceTerminateRequest(reason="x", scaling_group="nope", scaling_group_replica=0),
         "PodCliqueScalingGroup 'nope' does not exist in replica 0"),
    ):
        with pytest.raises(WorkflowUpdateFailedError) as failure:
            await handle.execute_update("force_terminate", request, result_type=ControlResult)
        message = str(getattr(failure.value.cause, "message", failure.value.cause))
        print(f"S10 rejected update: {message}")
        assert expected in message
    await asyncio.sleep(2)
    assert cluster.inventory() == before
    assert _comparable(await replica.status()) == _comparable(status_before), "no workflow state change"

    # The signal form cannot answer; it records the rejection where the status query shows it.
    await handle.signal("force_terminate", ForceTerminateRequest(reason="y", scaling_group="sg", scaling_group_replica=9))
    status = await replica.wait(lambda s: bool(s.rejected), what="signal rejection in status")
    assert "has replicas 0..1, not 9" in status.rejected[-1]
    await asyncio.sleep(2)
    assert cluster.inventory() == before
    status = await replica.status()
    assert status.terminations_total == 2 and status.incarnation == 2 and status.phase is Phase.AVAILABLE
    await histories.keep(handle, "s10_pause_resume_force_terminate")
