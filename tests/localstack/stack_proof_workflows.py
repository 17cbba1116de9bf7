"""A tiny workflow proving the dev server's durability: a signal, then a durable timer (test-only, not product code)."""

from __future__ import annotations

import asyncio
import os
import time
from datetime import timedelta
from pathlib import Path

from temporalio import activity, workflow
from temporalio.common import RetryPolicy


@workflow.defn
class SignalThenTimerWorkflow:
    """Waits for `proceed`, then sleeps on a server-side timer and returns how many signals it saw."""

    def __init__(self) -> None:
        self._signals = 0
        self._phase = "waiting-for-signal"

    @workflow.run
    async def run(self, timer_seconds: float) -> str:
        await workflow.wait_condition(lambda: self._signals > 0)
        self._phase = "timer-running"
        await asyncio.sleep(timedelta(seconds=timer_seconds).total_seconds())
        self._phase = "done"
        return f"done after {self._signals} signal(s)"

    @workflow.signal
    def proceed(self) -> None:
        self._signals += 1

    @workflow.query
    def phase(self) -> str:
        return self._phase


@workflow.defn
class GrowHistoryWorkflow:
    """Adds history with tiny timers and reports whether the server suggests continue-as-new."""

    @workflow.run
    async def run(self, timers: int) -> bool:
        for _ in range(timers):
            await asyncio.sleep(0.01)
        return workflow.info().is_continue_as_new_suggested()


@workflow.defn
class NudgeCountWorkflow:
    """Stands in for a replica workflow: counts the watcher's nudge signals until told to stop."""

    def __init__(self) -> None:
        self._nudges = 0
        self._done = False

    @workflow.run
    async def run(self) -> int:
        await workflow.wait_condition(lambda: self._done)
        return self._nudges

    @workflow.signal(name="nudge")
    def nudge(self) -> None:
        self._nudges += 1

    @workflow.signal
    def done(self) -> None:
        self._done = True

    @workflow.query
    def nudges(self) -> int:
        return self._nudges


with workflow.unsafe.imports_passed_through():
    from workflows.messages import Nudge


@workflow.defn
class NudgeVersionsWorkflow:
    """Records the versions of each nudge it receives, as the replica workflow's handler sees them."""

    def __init__(self) -> None:
        self._received: list[dict[str, int] | None] = []

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.signal(name="nudge")
    def nudge(self, nudge: Nudge) -> None:
        self._received.append(nudge.versions)

    @workflow.query
    def received(self) -> list[dict[str, int] | None]:
        return self._received


@workflow.defn
class PcsChangedWorkflow:
    """Records the PodCliqueSet keys of each pcs_changed signal, as the reconciler workflow receives them."""

    def __init__(self) -> None:
        self._received: list[list[str]] = []

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.signal(name="pcs_changed")
    def pcs_changed(self, keys: list[list[str]]) -> None:
        self._received.extend(keys)

    @workflow.query
    def received(self) -> list[list[str]]:
        return self._received


@activity.defn(name="slow")
def slow(seconds: float) -> str:
    """A sync activity (the product's run in a thread pool) that never heartbeats itself."""
    marker = os.environ.get("SLOW_ACTIVITY_STARTED")
    if marker:
        Path(marker).write_text(str(os.getpid()))
    time.sleep(seconds)
    return f"slept {seconds}s in {os.getpid()}"


@workflow.defn(name="OneSlowActivity")
class OneSlowActivity:
    @workflow.run
    async def run(self, seconds: float, heartbeat_seconds: float, attempts: int) -> str:
        return str(await workflow.execute_activity(
            "slow", seconds, start_to_close_timeout=timedelta(minutes=10),
            heartbeat_timeout=timedelta(seconds=heartbeat_seconds),
            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_attempts=attempts)))
