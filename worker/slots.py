"""Workflow-task slots that go to this worker's sticky queue first.

The SDK takes a slot before each poll of a workflow task queue and holds it until the task the poll fetched
completes. Its own fixed slots go to whichever poller asks first, and three of its five pollers poll the shared
queue (worker/config.py, nonsticky_poll_ratio). In a creation wave the shared queue holds every new replica's first
task, which materialises the replica (a local activity creating its objects: seconds each while the burst saturates
kube-apiserver), so the slots went mostly to first tasks. A nudge for a replica already up (the scaled gangs'
release, Available) waited on the sticky queue, and after the sticky timeout queued on the shared queue behind the
rest of the wave: up to 0.2 such timeouts per 17-pod replica in quiet B3 runs of 100 (more under load, 0.5 at 1,000),
two history events each, and a replica's scaled gangs released seconds to minutes after its base gang was scheduled,
which spread its pods' readiness over more status windows.

Here a freed slot goes to a waiting poll of the sticky queue before one of the shared queue: tasks of workflows
this worker holds (short: a read, a release, a status write) go before new work. The number of slots is the same.
The shared queue gets every slot the sticky pollers do not wait for: at most two polls (the SDK's sticky pollers)
wait at a time, so new work waits only while the sticky queue keeps handing out tasks.
B3, 100 replicas of 17 pods, quiet, back to back: sticky timeouts 0-0.2 to 0, events per replica max 26-33 to 20
and 25; at 1,000 replicas of 17 pods the longest queue wait went from 555 s to 20 s (docs/benchmarks.md).

A poll of the shared queue also waits, before it asks for a slot, while `hold_new_work` says so: while the worker
materialises as many replicas as its creation pace allows (activities/pacing.py), a new replica's first task would
only queue behind them inside its own workflow task.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from temporalio.worker import (
    CustomSlotSupplier,
    SlotMarkUsedContext,
    SlotPermit,
    SlotReleaseContext,
    SlotReserveContext,
)

# How often a held poll of the shared queue looks again: a materialisation takes a second or more when they are
# held, so 50 ms adds little to a first task's wait and costs nothing measurable.
HOLD_RECHECK_SECONDS = 0.05


@dataclass
class _Waiter:
    sticky: bool
    future: asyncio.Future[None]
    loop: asyncio.AbstractEventLoop


class StickyFirstSlots(CustomSlotSupplier):
    """`slots` workflow-task slots; one freed goes to the first waiting sticky poll, else to the first waiting poll
    (module docstring). The SDK may call release_slot from a thread of its own, so the count is kept under a lock
    and a waiting poll is woken on its own event loop."""

    def __init__(self, slots: int, hold_new_work: Callable[[], bool] | None = None) -> None:
        if slots < 1:
            raise ValueError(f"workflow-task slots must be at least 1, got {slots}")
        self._hold_new_work = hold_new_work
        self._free = slots
        self._lock = threading.Lock()
        self._waiters: deque[_Waiter] = deque()

    def free(self) -> int:
        with self._lock:
            return self._free

    async def reserve_slot(self, ctx: SlotReserveContext) -> SlotPermit:
        if not ctx.is_sticky and self._hold_new_work is not None:
            while self._hold_new_work():  # holding no slot meanwhile: sticky polls take every one freed
                await asyncio.sleep(HOLD_RECHECK_SECONDS)
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._free > 0:
                self._free -= 1
                return SlotPermit()
            waiter = _Waiter(ctx.is_sticky, loop.create_future(), loop)
            self._waiters.append(waiter)
        try:
            await waiter.future
        except asyncio.CancelledError:
            with self._lock:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
                elif waiter.future.done() and not waiter.future.cancelled():
                    self._give()  # handed a slot, then cancelled before it could use it
            raise
        return SlotPermit()

    def try_reserve_slot(self, ctx: SlotReserveContext) -> SlotPermit | None:
        if not ctx.is_sticky and self._hold_new_work is not None and self._hold_new_work():
            return None
        with self._lock:
            if self._free > 0 and not self._waiters:
                self._free -= 1
                return SlotPermit()
        return None

    def mark_slot_used(self, ctx: SlotMarkUsedContext) -> None:
        pass

    def release_slot(self, ctx: SlotReleaseContext) -> None:
        with self._lock:
            self._give()

    # --- under the lock -------------------------------------------------------------------------------------
    def _give(self) -> None:
        """A slot is free: to the first waiting sticky poll, else to the first waiting poll, else back."""
        waiter = next((w for w in self._waiters if w.sticky), None)
        if waiter is None and self._waiters:
            waiter = self._waiters[0]
        if waiter is None:
            self._free += 1
            return
        self._waiters.remove(waiter)
        waiter.loop.call_soon_threadsafe(self._hand, waiter)

    def _hand(self, waiter: _Waiter) -> None:
        """On the waiter's loop: a poll cancelled meanwhile passes the slot on."""
        if waiter.future.done():
            with self._lock:
                self._give()
        else:
            waiter.future.set_result(None)
