"""Activity heartbeats against the real Temporal dev server: the worker keeps a long activity alive by itself, and an
activity lost with its (killed) worker is retried after the heartbeat timeout instead of its start_to_close."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import TimeoutError, TimeoutType
from temporalio.worker import Worker

from tests.localstack.stack_proof_workflows import OneSlowActivity, slow
from worker.heartbeats import KeepAliveInterceptor

if TYPE_CHECKING:
    from localstack.stack import LocalStack

ROOT = Path(__file__).resolve().parents[2]


# A worker process to kill: the activity runs in it and is lost with it.
WORKER_SCRIPT = """
import asyncio, concurrent.futures, sys
from temporalio.client import Client
from temporalio.worker import Worker
from tests.localstack.stack_proof_workflows import OneSlowActivity, slow
from tests.localstack.stack_proof_workflows import OneSlowActivity, slow
from worker.heartbeats import KeepAliveInterceptor

async def main():
    client = await Client.connect(sys.argv[1])
    with concurrent.futures.ThreadPoolExecutor(4) as executor:
        await Worker(client, task_queue=sys.argv[2], workflows=[OneSlowActivity], activities=[slow],
                     activity_executor=executor, interceptors=[KeepAliveInterceptor()]).run()

asyncio.run(main())
"""


async def _run(client: Client, queue: str, interceptors: list[KeepAliveInterceptor], *args: float) -> str:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as executor:
        async with Worker(client, task_queue=queue, workflows=[OneSlowActivity], activities=[slow],
                          activity_executor=executor, interceptors=interceptors):
            return await client.execute_workflow(OneSlowActivity.run, args=list(args),
                                                 id=f"slow-{uuid.uuid4().hex[:8]}", task_queue=queue)


async def test_the_worker_heartbeats_an_activity_that_outlives_its_heartbeat_timeout(stack: LocalStack) -> None:
    client = await Client.connect(stack.temporal_address)
    queue = f"heartbeats-{uuid.uuid4().hex[:6]}"
    # 3 s of work under a 1 s heartbeat timeout, one attempt: alive only if someone heartbeats for it.
    assert (await _run(client, queue, [KeepAliveInterceptor()], 3.0, 1.0, 1)).startswith("slept 3.0s")
    with pytest.raises(WorkflowFailureError) as failed:
        await _run(client, queue, [], 3.0, 1.0, 1)
    timeout = failed.value.cause.__cause__ if failed.value.cause else None
    assert isinstance(timeout, TimeoutError) and timeout.type is TimeoutType.HEARTBEAT, failed.value.cause


async def test_an_activity_lost_with_its_worker_is_retried_after_the_heartbeat_timeout(
        stack: LocalStack, tmp_path: Path) -> None:
    """start_to_close is ten minutes; the heartbeat timeout three seconds. The first attempt dies with its worker
    (SIGKILL); the second runs on another worker and the workflow completes long before ten minutes."""
    client = await Client.connect(stack.temporal_address)
    queue = f"lost-{uuid.uuid4().hex[:6]}"
    marker = tmp_path / "started"
    doomed = subprocess.Popen([sys.executable, "-c", WORKER_SCRIPT, stack.temporal_address, queue], cwd=ROOT,
                              env={**os.environ, "SLOW_ACTIVITY_STARTED": str(marker), "PYTHONPATH": str(ROOT)})
    try:
        handle = await client.start_workflow(OneSlowActivity.run, args=[0.5, 3.0, 5],
                                             id=f"lost-{uuid.uuid4().hex[:8]}", task_queue=queue)
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert doomed.poll() is None, "the worker process exited before running the activity"
            assert time.monotonic() < deadline, "the activity never started in the worker process"
            await asyncio.sleep(0.05)
        doomed.send_signal(signal.SIGKILL)  # mid-activity: it sleeps 0.5 s, its completion is never sent
        doomed.wait(10)
        killed_pid = marker.read_text()
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(4) as executor:
            async with Worker(client, task_queue=queue, workflows=[OneSlowActivity], activities=[slow],
                              activity_executor=executor, interceptors=[KeepAliveInterceptor()]):
                result = await asyncio.wait_for(handle.result(), timeout=60)
        assert result == f"slept 0.5s in {os.getpid()}" and killed_pid != str(os.getpid())
        history = await handle.fetch_history()
        started = [e for e in history.events if e.HasField("activity_task_started_event_attributes")]
        assert started and started[-1].activity_task_started_event_attributes.attempt == 2, \
            "the second attempt (after the heartbeat timeout) completed the activity"
    finally:
        if doomed.poll() is None:
            doomed.kill()
            doomed.wait(10)
