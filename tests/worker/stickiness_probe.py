"""A worker process for tests/worker/test_stickiness.py: runs the probe workflow on a task queue under a given
identity until it is killed (`python -m tests.worker.stickiness_probe ADDRESS QUEUE IDENTITY`)."""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta

from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import Worker

READY = "probe worker polling"


@workflow.defn(name="StickinessProbe")
class Probe:
    def __init__(self) -> None:
        self.pokes = 0

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: self.pokes >= 2)

    @workflow.signal
    def poke(self) -> None:
        self.pokes += 1


def worker(client: Client, queue: str, identity: str) -> Worker:
    # A sticky timeout far longer than the test: a task left on a dead worker's sticky queue shows as a wait.
    return Worker(client, task_queue=queue, workflows=[Probe], identity=identity,
                  sticky_queue_schedule_to_start_timeout=timedelta(seconds=60))


async def main(address: str, queue: str, identity: str) -> None:
    client = await Client.connect(address)
    async with worker(client, queue, identity):
        print(READY, flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
