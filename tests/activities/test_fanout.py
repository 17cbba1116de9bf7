"""activities.fanout: concurrent calls, results in call order, the first failure (in call order) raised only once
every call has finished — what the sequential loops it replaced would have returned or raised."""

from __future__ import annotations

import threading
import time

import pytest

from activities.fanout import fan_out


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
