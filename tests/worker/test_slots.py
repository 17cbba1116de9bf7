"""worker/slots.py: workflow-task slots that go to the sticky queue first. Pure slot accounting, driven the way the
SDK drives a custom slot supplier (reserve before each poll, release when the task is done or the poll is dropped)."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import Any, cast

import pytest
from temporalio.worker import SlotPermit, SlotReleaseContext, SlotReserveContext

from worker.slots import StickyFirstSlots


@dataclass
class _Reserve:
    is_sticky: bool
    slot_type: str = "workflow"
    task_queue: str = "grove-temporal"
    worker_identity: str = "test"
    worker_build_id: str = ""
    worker_deployment_version: Any = None


@dataclass
class _Release:
    permit: SlotPermit
    slot_info: Any = None


def _ctx(sticky: bool) -> SlotReserveContext:
    return cast(SlotReserveContext, _Reserve(sticky))


def _release(slots: StickyFirstSlots, permit: SlotPermit) -> None:
    slots.release_slot(cast(SlotReleaseContext, _Release(permit)))


async def _pending(slots: StickyFirstSlots, sticky: bool) -> asyncio.Task[SlotPermit]:
    task = asyncio.create_task(slots.reserve_slot(_ctx(sticky)))
    await asyncio.sleep(0)
    return task


async def test_a_freed_slot_goes_to_a_waiting_sticky_poll_before_shared_polls_that_asked_earlier() -> None:
    """A creation wave: every slot is held by a first task from the shared queue, more shared polls wait, then a
    sticky poll asks. The next slot freed is the sticky poll's; the one after goes to the shared polls in order."""
    slots = StickyFirstSlots(2)
    first = [await slots.reserve_slot(_ctx(False)) for _ in range(2)]
    shared_1, shared_2 = await _pending(slots, False), await _pending(slots, False)
    sticky = await _pending(slots, True)
    _release(slots, first[0])
    await asyncio.wait_for(sticky, 1)
    assert not shared_1.done() and not shared_2.done()
    _release(slots, first[1])
    await asyncio.wait_for(shared_1, 1)
    assert not shared_2.done()
    for permit in (sticky.result(), shared_1.result()):
        _release(slots, permit)
    await asyncio.wait_for(shared_2, 1)
    _release(slots, shared_2.result())
    assert slots.free() == 2, "every slot came back"


async def test_no_more_slots_than_the_count_and_none_taken_past_a_waiting_poll() -> None:
    slots = StickyFirstSlots(2)
    held = [await slots.reserve_slot(_ctx(True)) for _ in range(2)]
    assert slots.free() == 0
    assert slots.try_reserve_slot(_ctx(True)) is None and slots.try_reserve_slot(_ctx(False)) is None
    waiting = await _pending(slots, False)
    _release(slots, held[0])
    assert slots.try_reserve_slot(_ctx(True)) is None, "the freed slot is the waiting poll's"
    await asyncio.wait_for(waiting, 1)
    _release(slots, held[1])
    assert slots.try_reserve_slot(_ctx(False)) is not None


async def test_a_poll_cancelled_while_it_waits_takes_no_slot_and_loses_none() -> None:
    slots = StickyFirstSlots(1)
    held = await slots.reserve_slot(_ctx(False))
    waiting = await _pending(slots, True)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    _release(slots, held)
    assert slots.free() == 1


async def test_a_poll_cancelled_after_it_was_handed_a_slot_passes_it_on() -> None:
    """The slot is handed on the waiter's loop after the release: cancelled in between, the poll passes it on."""
    slots = StickyFirstSlots(1)
    held = await slots.reserve_slot(_ctx(False))
    waiting = await _pending(slots, True)
    next_in_line = await _pending(slots, False)
    _release(slots, held)  # handed to `waiting` on the loop's next turn
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await asyncio.wait_for(next_in_line, 1)
    _release(slots, next_in_line.result())
    assert slots.free() == 1


async def test_a_release_from_another_thread_wakes_the_waiting_poll() -> None:
    slots = StickyFirstSlots(1)
    held = await slots.reserve_slot(_ctx(False))
    waiting = await _pending(slots, False)
    releaser = threading.Thread(target=_release, args=(slots, held))
    releaser.start()
    releaser.join()
    assert await asyncio.wait_for(waiting, 1) is not None


async def test_a_shared_poll_waits_while_new_work_is_held_and_takes_no_slot_meanwhile() -> None:
    """The creation pace is full (activities/pacing.py): a poll of the shared queue, where new replicas' first tasks
    come from, waits without a slot; a sticky poll takes one at once; the shared poll goes once the hold clears."""
    held = [True]
    slots = StickyFirstSlots(2, lambda: held[0])
    shared = await _pending(slots, False)
    await asyncio.sleep(0.12)  # two rechecks
    assert not shared.done() and slots.free() == 2, "waiting on the hold, not on a slot"
    assert slots.try_reserve_slot(_ctx(False)) is None
    sticky = await asyncio.wait_for(slots.reserve_slot(_ctx(True)), 1)
    assert slots.free() == 1
    held[0] = False
    await asyncio.wait_for(shared, 1)
    assert slots.free() == 0
    for permit in (sticky, shared.result()):
        _release(slots, permit)
    assert slots.try_reserve_slot(_ctx(False)) is not None


def test_a_bad_count_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="workflow-task slots must be at least 1, got 0"):
        StickyFirstSlots(0)
