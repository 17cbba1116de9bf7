"""What Temporal reports per workflow task when a local activity outlasts its task: the reason replica runs of
baseline 14 on count their history length (COUNTED_EVENTS_RULE in workflows/signals.py). If an SDK upgrade changes
this, the test says so, and the rule can be looked at again."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Replayer, Worker

from localstack.temporal import TemporalDevServer
from worker.history_activities import heartbeat_tasks

SEEN: list[tuple[str, int, bool]] = []


@activity.defn
async def slow_read(seconds: float) -> None:
    await asyncio.sleep(seconds)


@workflow.defn(sandboxed=False)
class OutlastingRead:
    def __init__(self) -> None:
        self.woken = False

    @workflow.signal
    def wake(self) -> None:
        self.woken = True

    @workflow.run
    async def run(self, seconds: float) -> None:
        await workflow.wait_condition(lambda: self.woken)
        SEEN.append(("before", workflow.info().get_current_history_length(), workflow.unsafe.is_replaying()))
        await workflow.execute_local_activity(slow_read, seconds, start_to_close_timeout=timedelta(seconds=20))
        SEEN.append(("after", workflow.info().get_current_history_length(), workflow.unsafe.is_replaying()))


async def test_a_replay_runs_the_heartbeat_tasks_of_a_long_local_activity_as_one(dev_server: TemporalDevServer) -> None:
    """The read outlasts its 2 s workflow task, so the worker heartbeats the task (a new task with no new event).
    The first execution reads the length of the task the signal woke it in before the read; a replay reads the length
    of the heartbeat task there: the same line of workflow code sees two lengths."""
    SEEN.clear()
    client = await Client.connect(dev_server.address)
    queue = f"boundaries-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=queue, workflows=[OutlastingRead], activities=[slow_read]):
        handle = await client.start_workflow(OutlastingRead.run, 2.5, id=queue, task_queue=queue,
                                             task_timeout=timedelta(seconds=2))
        await handle.signal(OutlastingRead.wake)
        await handle.result()
        history = await handle.fetch_history()
    live = dict((at, length) for at, length, replaying in SEEN if not replaying)
    SEEN.clear()
    await Replayer(workflows=[OutlastingRead]).replay_workflow(history)
    replayed = dict((at, length) for at, length, replaying in SEEN if replaying)
    assert live["before"] < live["after"], live  # a heartbeat task came between
    assert heartbeat_tasks(list(history.events)) == 1  # as the benchmarks count it: 2.5 s is one heartbeat at 1.6 s
    assert replayed == {"before": live["after"], "after": live["after"]}, (live, replayed)
