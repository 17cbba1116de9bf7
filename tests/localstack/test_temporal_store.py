"""The local stack's Temporal dev server keeps answering while clients give up on requests.

The dev server keeps its store in SQLite, on one connection. With the driver of the CLI's release (modernc.org/sqlite
v1.34.1), a request whose context ended mid-query interrupted every statement on it, and later ones too: other
clients' reads failed with "interrupted (9)" for seconds (a CI run failed on it); with v1.44.3 the connection was
dropped instead, and with it the in-memory store ("no such table"). The stack builds the CLI with v1.51.0
(localstack/binaries.py); this test is the storm that told them apart: clients cancelling requests after 1-15 ms,
beside clients whose reads must all succeed, on an in-memory store (the stack's default).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from datetime import timedelta

from temporalio.client import Client
from temporalio.service import RPCError

from localstack.temporal import TemporalDevServer

WORKFLOWS = 30
STORM_SECONDS = 15.0


async def storm(address: str, seconds: float, *, cancelling: int = 40, reading: int = 4) -> tuple[int, dict[str, int]]:
    """Reads that must succeed, and how each failed read failed, while `cancelling` loops send requests they give
    up on after 1-15 ms (a describe, a signal or a history read of workflows no worker runs)."""
    client = await Client.connect(address)
    ids = [f"store-storm-{i}" for i in range(WORKFLOWS)]
    for workflow_id in ids:
        await client.start_workflow("NoWorkerRunsThis", id=workflow_id, task_queue="store-storm")
    end = time.monotonic() + seconds
    rng = random.Random(7)
    read, failed = 0, Counter[str]()

    async def give_up() -> None:
        while time.monotonic() < end:
            handle = client.get_workflow_handle(rng.choice(ids))
            deadline = timedelta(milliseconds=rng.uniform(1, 15))
            kind = rng.randrange(3)
            try:
                if kind == 0:
                    await handle.describe(rpc_timeout=deadline)
                elif kind == 1:
                    await handle.signal("nudge", rpc_timeout=deadline)
                else:
                    await handle.fetch_history(rpc_timeout=deadline)
            except (TimeoutError, RPCError):
                pass  # given up on, as meant

    async def must_read() -> None:
        nonlocal read
        while time.monotonic() < end:
            try:
                await client.get_workflow_handle(rng.choice(ids)).describe(rpc_timeout=timedelta(seconds=10))
                read += 1
            except RPCError as err:
                failed[str(err)[:80]] += 1

    await asyncio.gather(*(give_up() for _ in range(cancelling)), *(must_read() for _ in range(reading)))
    return read, dict(failed)


async def test_reads_succeed_while_other_clients_give_up_on_their_requests(dev_server: TemporalDevServer) -> None:
    read, failed = await storm(dev_server.address, STORM_SECONDS)
    assert failed == {}, f"{sum(failed.values())} reads failed beside {read} that succeeded: {failed}"
    assert read >= 50, f"only {read} reads in {STORM_SECONDS:.0f} s: the storm did not run"
