"""What the fault runner reports about a run's open workflows when a round does not converge, against a real
Temporal dev server: a pending activity, a workflow task held open by a local activity (invisible among pending
activities), a workflow task failing over and over, nothing for a quiet workflow, and every history written out."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from faults.diagnose import HELD_TASK_SECONDS, open_workflow_lines
from localstack.temporal import TemporalDevServer

pytestmark = pytest.mark.stack  # starts a real Temporal dev server of its own (no Kubernetes)

RELEASE = asyncio.Event()


@activity.defn
async def hangs() -> None:
    await RELEASE.wait()


@workflow.defn
class HeldByLocalActivity:
    @workflow.run
    async def run(self) -> None:
        await workflow.execute_local_activity(hangs, start_to_close_timeout=timedelta(minutes=2))


@workflow.defn
class WaitsOnAnActivity:
    @workflow.run
    async def run(self) -> None:  # no worker polls that queue: the activity stays scheduled
        await workflow.execute_activity("never_polled", task_queue=f"nobody-{workflow.info().workflow_id}",
                                        start_to_close_timeout=timedelta(minutes=2))


@workflow.defn
class FailsEveryTask:
    @workflow.run
    async def run(self) -> None:
        raise RuntimeError("this build cannot run the workflow")  # a task failure: Temporal retries it


@workflow.defn
class Quiet:
    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)


async def test_held_failing_and_pending_work_is_named_and_every_history_written(
        dev_server: TemporalDevServer, tmp_path: Path) -> None:
    client = await Client.connect(dev_server.address)
    queue = f"diag-{uuid.uuid4().hex[:8]}"
    kinds = {"held": HeldByLocalActivity, "waits": WaitsOnAnActivity, "fails": FailsEveryTask, "quiet": Quiet}
    ids = {name: f"{queue}/{name}" for name in kinds}
    async with Worker(client, task_queue=queue, workflows=list(kinds.values()), activities=[hangs],
                      workflow_runner=UnsandboxedWorkflowRunner()):
        handles = [await client.start_workflow(kind.run, id=ids[name], task_queue=queue)  # type: ignore[arg-type]
                   for name, kind in kinds.items()]
        try:
            await asyncio.sleep(HELD_TASK_SECONDS + 1.5)
            for _ in range(100):  # until the failing task has been retried at least once
                task = (await client.get_workflow_handle(ids["fails"]).describe()).raw_description
                if task.HasField("pending_workflow_task") and task.pending_workflow_task.attempt > 1:
                    break
                await asyncio.sleep(0.2)
            lines = await open_workflow_lines(client, queue, tmp_path / "histories")
        finally:
            # Terminate before releasing: a released local activity lets its workflow complete, and terminating a
            # completed workflow fails.
            for handle in handles:
                await handle.terminate("test over")
            RELEASE.set()

    text = "\n".join(lines)
    assert f"pending in {ids['waits']}: never_polled attempt 1 (SCHEDULED)" in text
    assert any(line.startswith(f"workflow task of {ids['held']}: attempt 1 (STARTED") and "held open" in line
               for line in lines), text
    assert any(line.startswith(f"workflow task of {ids['fails']}: attempt ") and "failing, retried" in line
               for line in lines), text
    assert ids["quiet"] not in text
    assert lines[-1] == f"histories of 4 open workflows written to {tmp_path / 'histories'}"
    written = sorted(path.name for path in (tmp_path / "histories").iterdir())
    assert written == sorted(f"{queue}_{name}.json" for name in kinds)
    started = json.loads((tmp_path / "histories" / f"{queue}_held.json").read_text())["events"][0]
    assert started["workflowExecutionStartedEventAttributes"]["workflowType"]["name"] == "HeldByLocalActivity"


async def test_a_run_with_nothing_pending_says_so(dev_server: TemporalDevServer, tmp_path: Path) -> None:
    client = await Client.connect(dev_server.address)
    lines = await open_workflow_lines(client, f"empty-{uuid.uuid4().hex[:8]}", tmp_path / "h")
    assert lines == ["no workflow of this run has an activity pending or a workflow task failing or held",
                     f"histories of 0 open workflows written to {tmp_path / 'h'}"]
