"""Bounded signals: a storm of 20,000 nudges to one replica (twice Temporal's per-run cap of 10,000 signals) while it
runs normally. The replica keeps working (a readiness failure in the middle of the storm is seen, a pause update is
answered), hands over by continue-as-new whenever a run's signal budget is spent, well before the caps, and loses
nothing: every nudge the storm sent is in some run's history and counted by the workflow."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pytest
import pytest_asyncio
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError

from tests.e2e.conftest import Histories
from tests.e2e.harness import Cluster, Replica, WorkerProcess, await_for, clique, pcs_manifest, wait_for
from workflows.contract import NUDGE_SIGNAL
from workflows.messages import ControlResult, Nudge, PauseRequest, Phase
from workflows.signals import SIGNAL_BUDGET_PATCH, SIGNALS_PER_RUN

STORM = 20_000
CONCURRENCY = 48
STORM_IDENTITY = "signal-storm"
TEMPORAL_SIGNAL_CAP = 10_000
TEMPORAL_HISTORY_WARN = 10_240  # events: Temporal warns here, and stops the run at 51,200

if TYPE_CHECKING:
    from localstack.stack import LocalStack


@pytest_asyncio.fixture(loop_scope="session")
async def storm_client(stack: LocalStack) -> AsyncIterator[Client]:
    """The storm's own client: its identity marks the nudges it sent in the histories."""
    yield await Client.connect(stack.temporal_address, data_converter=pydantic_data_converter,
                               identity=STORM_IDENTITY)


async def _storm(client: Client, workflow_id: str, sent: list[int], retried: list[str]) -> None:
    handle = client.get_workflow_handle(workflow_id)
    queue: asyncio.Queue[int] = asyncio.Queue()
    for n in range(STORM):
        queue.put_nowait(n)

    async def sender() -> None:
        while not queue.empty():
            queue.get_nowait()
            while True:
                try:
                    await handle.signal(NUDGE_SIGNAL, Nudge(sent_at=datetime.now(UTC)))
                    break
                except RPCError as err:  # as the watcher's Nudger does: keep it and send again
                    retried.append(err.message)
                    await asyncio.sleep(0.5)
            sent[0] += 1

    await asyncio.gather(*(sender() for _ in range(CONCURRENCY)))


@pytest.mark.xfail(run=False, strict=True, reason=(
    "not met yet (issue 19 item 2): on the 2-core test machine a sustained storm drives the replica workflow into "
    "failing workflow tasks once a run holds a few thousand signals: the continue-as-new is refused while signals "
    "keep arriving (UnhandledCommand), the retry replays the whole run and one activation with ~3,000 buffered "
    "signals exceeds the SDK's 2 s deadlock detector or the 10 s task timeout, so every retry fails. Seen with 48 "
    "concurrent senders and with one sequential sender (the watcher's most: one nudge in flight per replica)."))
async def test_a_storm_of_20000_nudges_is_absorbed_by_continue_as_new_and_nothing_is_lost(
        cluster: Cluster, worker_process: WorkerProcess, storm_client: Client,
        temporal_client: Client, histories: Histories) -> None:
    cluster.apply(pcs_manifest("storm", cluster.namespace, termination_delay="600s", cliques=[clique("app", 2, 2)]))
    wait_for(lambda: cluster.ready_pods(2), timeout=60, what="2 Ready pods")
    replica = Replica(temporal_client, cluster, "storm")
    await replica.wait_phase(Phase.AVAILABLE, timeout=60)
    first_run = (await replica.handle.describe()).run_id

    sent, retried = [0], []
    started = time.monotonic()
    storm = asyncio.create_task(_storm(storm_client, replica.workflow_id, sent, retried))
    # --- it keeps working in the middle of the storm ---
    await asyncio.sleep(5)
    assert not storm.done()
    cluster.fail_readiness("storm-0-app-1")
    breached = await replica.wait(lambda s: bool(s.deadlines), timeout=60, what="breach seen during the storm")
    paused = await replica.handle.execute_update("pause", PauseRequest(reason="storm"), result_type=ControlResult)
    assert paused.accepted, paused
    cluster.fail_readiness("storm-0-app-1", failing=False)
    await replica.wait(lambda s: not s.deadlines and s.paused, timeout=60, what="healed and paused during the storm")
    during = sent[0]
    await storm
    took = time.monotonic() - started
    assert during < STORM, "the checks above ran while the storm was still blowing"

    # --- settled: one more round on a fresh nudge, and every nudge counted ---
    resumed = await replica.handle.execute_update("resume", result_type=ControlResult)
    assert resumed.accepted
    status = await replica.wait_phase(Phase.AVAILABLE, timeout=60)

    async def all_runs() -> list[WorkflowExecution] | None:  # visibility catches up with the last hand-over
        found = [e async for e in temporal_client.list_workflows(f"WorkflowId = '{replica.workflow_id}'")]
        return sorted(found, key=lambda e: e.start_time) if len(found) == status.runs else None

    runs: list[WorkflowExecution] = await await_for(all_runs, timeout=30, what=f"{status.runs} runs listed")
    per_run: list[tuple[str, int, int, int]] = []  # run id, storm nudges, all nudges, events
    for run in runs:
        history = await temporal_client.get_workflow_handle(replica.workflow_id, run_id=run.run_id).fetch_history()
        nudges = [e.workflow_execution_signaled_event_attributes for e in history.events
                  if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
                  and e.workflow_execution_signaled_event_attributes.signal_name == NUDGE_SIGNAL]
        per_run.append((run.run_id, sum(1 for n in nudges if n.identity == STORM_IDENTITY), len(nudges),
                        len(history.events)))
        if run.status is WorkflowExecutionStatus.CONTINUED_AS_NEW:
            assert history.events[-1].HasField("workflow_execution_continued_as_new_event_attributes")
            assert len(nudges) < TEMPORAL_SIGNAL_CAP // 2, f"run {run.run_id} held {len(nudges)} nudges"
            assert len(history.events) < TEMPORAL_HISTORY_WARN, f"run {run.run_id}: {len(history.events)} events"
    budget_runs = 0
    for run in runs[:-1]:
        history = await temporal_client.get_workflow_handle(replica.workflow_id, run_id=run.run_id).fetch_history()
        markers = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED]
        budget_runs += any(SIGNAL_BUDGET_PATCH.encode() in m.SerializeToString() for m in markers)
    stormed = [r for r in per_run if r[1]]
    print(f"\nstorm: {STORM} nudges in {took:.1f}s ({STORM / took:.0f}/s, {len(retried)} retried), {len(runs)} runs "
          f"({budget_runs} handed over on the signal budget); storm nudges per run {[r[1] for r in stormed]}; events "
          f"per run {[r[3] for r in per_run]}; a pause was answered and a breach seen while {STORM - during} were "
          f"still to come")
    assert sum(r[1] for r in per_run) == STORM, "every nudge the storm sent is in a run's history, once"
    assert status.nudges_total == sum(r[2] for r in per_run), "the workflow counted every nudge across its runs"
    assert runs[0].run_id == first_run and len(runs) >= STORM // SIGNALS_PER_RUN, "handed over again and again"
    assert budget_runs >= 1, "at least one hand-over came from the signal budget"
    assert status.signals < SIGNALS_PER_RUN
    assert breached.deadlines and not [m for m in retried if "limit" in m], "no nudge refused for a cap"
    await histories.keep(temporal_client.get_workflow_handle(replica.workflow_id, run_id=runs[-2].run_id),
                         "storm_run_ends_in_continue_as_new")
