"""The worker's periodic stuck-workflow check on a Temporal server whose visibility cannot name the workflows with
failing tasks (the dev server of the pinned Temporal CLI): it describes a batch of running replica workflows per
check, in turn, not every one of them each minute, and still finds every stuck one within a pass.

Real Temporal dev server; the replica workflows are stand-ins registered under the replica workflow's type, two of
which raise on every workflow task (Temporal retries such a task forever: stuck)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from temporalio import workflow
from temporalio.client import Client
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from localstack.temporal import TemporalDevServer
from worker.doctor import StuckMonitor, describe_stuck, reported_problems
from workflows.contract import GROVE_NAMESPACE, REPLICA_WORKFLOW

pytestmark = pytest.mark.stack  # starts a real Temporal dev server of its own (no Kubernetes)

HEALTHY = ("a-ok-1", "a-ok-2", "a-ok-3")
FAILING = ("b-fail-1", "b-fail-2")  # sorted after the healthy ones: the sweep reaches them in its second batch


@workflow.defn(name=REPLICA_WORKFLOW)
class StandInReplica:
    @workflow.run
    async def run(self, fail: bool) -> None:
        if fail:
            raise RuntimeError("this build cannot run the replica")  # fails the workflow task, retried forever
        await workflow.wait_condition(lambda: False)


@pytest.fixture
async def fleet(dev_server: TemporalDevServer) -> AsyncIterator[tuple[Client, str]]:
    client = await Client.connect(dev_server.address, data_converter=pydantic_data_converter)
    scope, queue = f"sweep-{uuid.uuid4().hex[:8]}", f"sweep-{uuid.uuid4().hex[:8]}"
    attributes = TypedSearchAttributes([SearchAttributePair(GROVE_NAMESPACE, scope)])
    async with Worker(client, task_queue=queue, workflows=[StandInReplica],
                      workflow_runner=UnsandboxedWorkflowRunner()):
        handles = [await client.start_workflow(REPLICA_WORKFLOW, name in FAILING, id=f"{scope}-{name}",
                                               task_queue=queue, search_attributes=attributes)
                   for name in (*HEALTHY, *FAILING)]
        try:
            yield client, scope
        finally:
            for handle in handles:
                await handle.terminate("test over")


async def _until_failing(client: Client, scope: str, attempts: int) -> None:
    ids = [f"{scope}-{name}" for name in FAILING]
    for _ in range(200):
        if len(await describe_stuck(client, ids, min_attempts=attempts)) == len(ids):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the failing stand-ins never reached {attempts} failed workflow-task attempts")


async def test_a_server_without_problem_search_is_swept_a_batch_per_check_and_every_stuck_one_found(
        fleet: tuple[Client, str]) -> None:
    client, scope = fleet
    if await reported_problems(client, scope) is not None:
        pytest.skip("this Temporal server names workflows with failing tasks itself: no sweep is needed")
    await _until_failing(client, scope, attempts=2)
    await asyncio.sleep(2)  # visibility lists what was started (the dev server's is eventually consistent)
    monitor = StuckMonitor(client, namespace=scope, min_attempts=2, sweep_batch=2)
    stuck_after, summaries = [], []
    for _ in range(4):
        found = await monitor.check()
        stuck_after.append([s.workflow_id.removeprefix(f"{scope}-") for s in found])
        summaries.append(monitor.summary())
        assert monitor.swept is not None and monitor.swept[1] == 5, monitor.swept
        # a batch of two, plus those already found stuck (described every time, to see them heal)
        assert monitor.swept[0] <= 2 + len(stuck_after[-2] if len(stuck_after) > 1 else []), monitor.swept
    # first batch: two healthy ones; second: the last healthy one and the first failing one; third: the second
    # failing one (and the first again); fourth, a new pass: two healthy ones, and both stuck ones still reported
    assert stuck_after == [[], ["b-fail-1"], ["b-fail-1", "b-fail-2"], ["b-fail-1", "b-fail-2"]]
    assert summaries[0] == "ok (2 of 5 running replica workflows described per check)", summaries[0]
    assert summaries[-1].startswith("2 stuck: "), summaries[-1]
    assert all("this build cannot run the replica" in s.message for s in monitor.stuck)
