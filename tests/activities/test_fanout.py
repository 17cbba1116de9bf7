"""activities.fanout: concurrent calls, results in call order, the first failure (in call order) raised only once
every call has finished — what the sequential loops it replaced would have returned or raised."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from activities.fanout import fan_out, gather_all


def test_results_come_back_in_call_order_and_calls_overlap() -> None:
    started = threading.Barrier(3, timeout=5)  # only passes if three calls run at the same time

    def call(value: int) -> int:
        started.wait()
        time.sleep(0.01 * (3 - value))
        return value

    assert fan_out([lambda v=v: call(v) for v in range(3)]) == [0, 1, 2]


def test_nothing_and_one_call_run_inline() -> None:
    assert fan_out([]) == []
    assert fan_out([threading.current_thread]) == [threading.current_thread()]


def test_the_first_failure_in_call_order_is_raised_after_all_finished() -> None:
    finished: list[int] = []

    def ok(value: int) -> int:
        time.sleep(0.05)
        finished.append(value)
        return value

    def fail(message: str) -> int:
        raise ValueError(message)

    with pytest.raises(ValueError, match="second"):
        fan_out([lambda: ok(0), lambda: fail("second"), lambda: ok(2), lambda: fail("fourth")])
    assert sorted(finished) == [0, 2]


async def test_gather_all_lets_every_coroutine_finish_before_the_first_failure_is_raised() -> None:
    finished: list[str] = []

    async def fails_first() -> None:
        raise ValueError("first")

    async def fails_later() -> None:
        await asyncio.sleep(0.02)
        raise KeyError("later")

    async def slow() -> None:
        await asyncio.sleep(0.05)
        finished.append("slow")  # plain gather would have returned (raised) before this

    with pytest.raises(ValueError, match="first"):
        await gather_all([slow(), fails_first(), fails_later()])
    assert finished == ["slow"]
    await gather_all(iter([slow()]))  # any iterable; nothing raised when nothing fails
    assert finished == ["slow", "slow"]


def test_a_bulk_fan_out_that_fills_its_pool_does_not_hold_up_a_short_one() -> None:
    """Pod creates of new replicas go on the bulk pool: a gate release meanwhile waits for nothing but its own calls."""
    from concurrent.futures import ThreadPoolExecutor

    from activities.fanout import FANOUT_THREADS

    go = threading.Event()

    def blocked() -> int:
        go.wait(5)
        return 1

    with ThreadPoolExecutor(1) as caller:
        bulk = caller.submit(fan_out, [blocked] * (3 * FANOUT_THREADS), bulk=True)
        time.sleep(0.05)  # every bulk thread busy, the rest queued
        began = time.monotonic()
        assert fan_out([lambda: 2, lambda: 3, lambda: 4]) == [2, 3, 4]
        assert time.monotonic() - began < 1.0, "the short fan-out waited behind the bulk one"
        assert not bulk.done()
        go.set()
        assert bulk.result(5) == [1] * (3 * FANOUT_THREADS)
