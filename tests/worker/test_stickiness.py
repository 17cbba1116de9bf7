"""A restarted lone worker sends its dead predecessor's workflows back to the shared task queue, and leaves them
alone beside another live worker (worker/stickiness.py). On the local stack's real Temporal server, with the dead
worker a process killed with SIGKILL (a worker that shuts down cleanly tells the server, and nothing waits)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from typing import TYPE_CHECKING

import pytest
from temporalio.api.enums.v1 import TimeoutType
from temporalio.client import Client, WorkflowHandle

from tests.worker.stickiness_probe import READY, Probe, worker
from worker.stickiness import release_dead_workers_workflows

if TYPE_CHECKING:
    from localstack.stack import LocalStack

pytestmark = pytest.mark.stack


async def _sticky_timeouts(handle: WorkflowHandle[Probe, None]) -> int:
    return sum(1 for e in (await handle.fetch_history()).events
               if e.HasField("workflow_task_timed_out_event_attributes")
               and e.workflow_task_timed_out_event_attributes.timeout_type
               == TimeoutType.TIMEOUT_TYPE_SCHEDULE_TO_START)


async def _killed_worker_held(client: Client, address: str, queue: str, identity: str) -> WorkflowHandle[Probe, None]:
    """A probe workflow whose tasks ran on a worker process now killed with -9 (its sticky queue is dead)."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.worker.stickiness_probe", address, queue, identity],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), timeout=60)
        assert READY in line, line
        handle = await client.start_workflow(Probe.run, id=f"probe-{uuid.uuid4().hex[:8]}", task_queue=queue)
        await handle.signal(Probe.poke)
        for _ in range(100):  # started, poked: both tasks completed by the probe process
            if (await handle.describe()).history_length >= 8:
                break
            await asyncio.sleep(0.1)
    finally:
        proc.kill()
        proc.wait()
    return handle


@pytest.mark.parametrize("reset", [True, False], ids=["reset", "not-reset"])
async def test_a_lone_restarted_worker_sends_the_killed_workers_workflows_to_the_shared_queue(
        stack: LocalStack, reset: bool) -> None:
    client = await Client.connect(stack.temporal_address)
    queue = f"stickiness-{uuid.uuid4().hex[:8]}"
    dead, alive = f"host-{uuid.uuid4().hex[:6]}-1", f"host-{uuid.uuid4().hex[:6]}-2"
    handle = await _killed_worker_held(client, stack.temporal_address, queue, dead)

    # Another worker polled the queue lately: nothing is reset (its workflows cannot be told from the dead one's).
    assert await release_dead_workers_workflows(client, queue, alive, dead="some-other-dead-worker") == 0
    if reset:  # alone, apart from the dead holder: every running workflow of the queue is reset
        for _ in range(50):  # visibility catches up with the start within moments
            if (done := await release_dead_workers_workflows(client, queue, alive, dead)):
                break
            await asyncio.sleep(0.2)
        assert done == 1
    async with worker(client, queue, alive):
        await handle.signal(Probe.poke)
        if reset:
            await asyncio.wait_for(handle.result(), timeout=20)
            assert await _sticky_timeouts(handle) == 0, "the task went to the shared queue, not the dead worker's"
        else:  # what the reset saves: the task waits on the dead worker's sticky queue
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(handle.result()), timeout=8)
