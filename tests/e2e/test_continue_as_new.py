"""Continue-as-new while a terminationDelay is pending: the next run carries the breach and terminates at the
original deadline, exactly once.

The history-count suggestion threshold is server-wide dynamic config, so this test runs on its own Temporal dev
server (beside the stack's) with `limit.historyCount.suggestContinueAsNew` set very low, and a worker process
pointed at it. The workflow's own caps (`history_event_limit`, HISTORY_EVENTS_PER_RUN) are far above what a run here reaches:
every continue-as-new here is the server-suggested path.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import pytest_asyncio
from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus
from temporalio.contrib.pydantic import pydantic_data_converter

from tests.e2e.conftest import Histories
from tests.e2e.harness import Cluster, Replica, Timeline, WorkerProcess, clique, pcs_manifest, wait_for
from workflows.contract import NUDGE_SIGNAL
from workflows.messages import ControlResult, ForceTerminateRequest, PauseRequest, Phase
from workflows.signals import HISTORY_EVENTS_PER_RUN

if TYPE_CHECKING:
    from localstack.stack import LocalStack
    from localstack.temporal import TemporalDevServer

SUGGEST_AFTER_EVENTS = 18  # a run passes this after its first round and a nudged one (local activities: one marker each)
DELAY_S = 10


@pytest.fixture(scope="module")
def can_server(stack: LocalStack) -> TemporalDevServer:
    return stack.add_temporal_server(
        "temporal-can", dynamic_config={"limit.historyCount.suggestContinueAsNew": SUGGEST_AFTER_EVENTS})


@pytest_asyncio.fixture(loop_scope="session")
async def can_client(can_server: TemporalDevServer) -> AsyncIterator[Client]:
    yield await Client.connect(can_server.address, data_converter=pydantic_data_converter)


@pytest.fixture
def can_worker(stack: LocalStack, can_server: TemporalDevServer, namespace: str, crds: list[str],
               request: pytest.FixtureRequest) -> Iterator[WorkerProcess]:
    log_dir = Path(stack.run_dir) / "test-workers"
    log_dir.mkdir(parents=True, exist_ok=True)
    process = WorkerProcess(kubeconfig=Path(stack.kubeconfig), temporal_address=can_server.address,
                            namespace=namespace, log_dir=log_dir).start()
    try:
        yield process
    finally:
        process.stop()
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            print(f"--- worker log ---\n{process.logs()[-20000:]}")


async def _runs(client: Client, workflow_id: str) -> list[WorkflowExecution]:
    return sorted([e async for e in client.list_workflows(f"WorkflowId = '{workflow_id}'")],
                  key=lambda e: e.start_time)


async def test_continue_as_new_during_a_pending_delay_terminates_at_the_original_deadline(
        cluster: Cluster, can_worker: WorkerProcess, can_client: Client, timeline: Timeline,
        histories: Histories) -> None:
    cluster.apply(pcs_manifest("can", cluster.namespace, termination_delay=f"{DELAY_S}s",
                               cliques=[clique("frontend", 2, 2), clique("api", 2, 1)]))
    wait_for(lambda: cluster.ready_pods(4), timeout=60, what="4 Ready pods")
    replica = Replica(can_client, cluster, "can")
    await replica.wait_phase(Phase.AVAILABLE)
    before = cluster.inventory()

    cluster.fail_readiness("can-0-frontend-1")
    breached = await replica.wait(lambda s: bool(s.deadlines), what="deadline")
    deadline = breached.deadlines[0]
    # The server's suggestion is read when a workflow task starts. A round's local activities add their events
    # inside one task, so the run that saw the breach can reach the timer without another task and wait out the
    # whole delay; a nudge during the delay (as any pod change brings) starts a task past the threshold.
    for _ in range(2):
        await replica.handle.signal(NUDGE_SIGNAL)
        await asyncio.sleep(1.0)
    wait_for(lambda: cluster.live_pclq_uids().get("can-0-frontend") not in (None, before["PodClique/can-0-frontend"]),
             timeout=DELAY_S + 30, what="terminated and recreated")
    status = await replica.status()
    assert status.terminations_total == 1 and status.runs > breached.runs, (status.runs, breached.runs)
    record = status.terminations[0]
    assert record.breach_start == deadline.breach_start and record.deadline == deadline.due_at
    assert record.at >= deadline.due_at
    deleting = min(m["deleting"] for m in timeline.of("PodClique", "can-0-frontend") if "deleting" in m)
    assert deleting >= deadline.due_at.timestamp(), "never early"

    # The run chain: some run ended in continue-as-new while the delay was pending, on the server's suggestion.
    runs = await wait_for_runs(can_client, replica.workflow_id, deadline.breach_start, deadline.due_at)
    handed_over = runs[0]
    history = await can_client.get_workflow_handle(replica.workflow_id, run_id=handed_over.run_id).fetch_history()
    assert history.events[-1].HasField("workflow_execution_continued_as_new_event_attributes")
    assert any(e.workflow_task_started_event_attributes.suggest_continue_as_new for e in history.events
               if e.HasField("workflow_task_started_event_attributes")), "the server suggested it"
    assert len(history.events) < HISTORY_EVENTS_PER_RUN, "not the workflow's own cap on events per run"
    all_runs = await _runs(can_client, replica.workflow_id)
    successor = next(r for r in all_runs if r.start_time >= handed_over.close_time)  # type: ignore[operator]
    print(f"\nCAN: {len(all_runs)} runs so far; run {handed_over.run_id[:8]} continued as new "
          f"{(handed_over.close_time - deadline.breach_start).total_seconds():.1f}s into the {DELAY_S}s delay "  # type: ignore[operator]
          f"after {len(history.events)} events; terminated {(record.at - deadline.due_at).total_seconds() * 1000:.0f} ms "
          "after the original deadline")
    await histories.keep(can_client.get_workflow_handle(replica.workflow_id, run_id=handed_over.run_id),
                         "can_run_ends_in_continue_as_new")
    await histories.keep(can_client.get_workflow_handle(replica.workflow_id, run_id=successor.run_id),
                         "can_run_started_from_continue_as_new")

    wait_for(lambda: cluster.ready_pods(4), timeout=60, what="replica back to Ready")
    await replica.wait_phase(Phase.AVAILABLE)
    status = await replica.status()
    assert status.terminations_total == 1 and len(cluster.events("GangTerminated")) == 1, "exactly once"


async def wait_for_runs(client: Client, workflow_id: str, after: object, before: object) -> list[WorkflowExecution]:
    """Runs that ended in continue-as-new between `after` and `before` (visibility is eventually consistent)."""
    found: list[WorkflowExecution] = []
    for _ in range(50):
        found = [r for r in await _runs(client, workflow_id)
                 if r.status is WorkflowExecutionStatus.CONTINUED_AS_NEW and r.close_time is not None
                 and after < r.close_time < before]  # type: ignore[operator]
        if found:
            return found
        await asyncio.sleep(0.2)
    chain = [(r.run_id[:8], r.status.name if r.status else None, f"{r.start_time:%H:%M:%S.%f}",
              f"{r.close_time:%H:%M:%S.%f}" if r.close_time else None, r.history_length)
             for r in await _runs(client, workflow_id)]
    raise AssertionError(f"no run continued as new during the pending delay ({after} .. {before}): {chain}")




async def test_controls_are_served_and_pause_is_carried_while_continue_as_new_is_suggested(
        cluster: Cluster, can_worker: WorkerProcess, can_client: Client) -> None:
    """With the server suggesting continue-as-new after every round, a force_terminate update (whose handler waits
    for the main loop to act) is still answered instead of the run waiting for it to finish before handing over,
    and pause survives the hand-overs."""
    cluster.apply(pcs_manifest(
        "canctl", cluster.namespace, termination_delay="60s",
        cliques=[clique("frontend", 1, 1), clique("leader", 1, 1)],
        scaling_groups=[{"name": "sg", "replicas": 2, "minAvailable": 1, "cliqueNames": ["leader"]}],
    ))
    wait_for(lambda: cluster.ready_pods(3), timeout=60, what="3 Ready pods")
    replica = Replica(can_client, cluster, "canctl")
    await replica.wait_phase(Phase.AVAILABLE)
    handle = replica.handle
    paused = await handle.execute_update("pause", PauseRequest(reason="maintenance"), result_type=ControlResult)
    assert paused.accepted
    runs_paused = (await replica.status()).runs
    old_uid = cluster.live_pclq_uids()["canctl-0-sg-1-leader"]

    forced = await asyncio.wait_for(
        handle.execute_update("force_terminate", ForceTerminateRequest(scaling_group="sg", scaling_group_replica=1,
                                                                      reason="bad GPU"), result_type=ControlResult),
        timeout=30)
    assert forced.accepted and forced.termination is not None, forced
    wait_for(lambda: cluster.live_pclq_uids().get("canctl-0-sg-1-leader") not in (None, old_uid), timeout=30,
             what="PCSG replica 1 recreated")
    status = await replica.wait(lambda s: s.runs > runs_paused, timeout=60, what="a continue-as-new after the pause")
    assert status.paused and status.pause_reason == "maintenance", "pause carried across continue-as-new"
    assert status.terminations_total == 1 and status.terminations[0].forced
    await asyncio.sleep(2)
    assert any(cluster.gates().values()), "paused: the recreated pods keep their gates"
    resumed = await asyncio.wait_for(handle.execute_update("resume", result_type=ControlResult), timeout=30)
    assert resumed.accepted and not (await replica.status()).paused
    wait_for(lambda: cluster.ready_pods(3), timeout=60, what="3 Ready pods again after resume")
