"""Stopping a benchmark: SIGINT or SIGTERM ends whatever it waits on and lets it tear its stack down.

A scenario waits in threads (an observer polling for a state, a floor following its pods). Ctrl-C cancelled the
asyncio task but left those threads running, and the interpreter waited for them (up to a scenario's timeout,
fifteen minutes) before it exited. Here SIGINT and SIGTERM both cancel the scenario (its `finally` blocks stop the
workers and the stack) and set STOP, which every wait in bench/ checks (`pause`, `check`).
"""

from __future__ import annotations

import asyncio
import signal
import threading

STOP = threading.Event()


class Interrupted(Exception):
    """The benchmark was asked to stop (SIGINT or SIGTERM) while this wait ran."""


def pause(seconds: float) -> None:
    """time.sleep, except that a stop ends it with Interrupted."""
    if STOP.wait(max(seconds, 0.0)):
        raise Interrupted("stopped")


def check() -> None:
    if STOP.is_set():
        raise Interrupted("stopped")


def on_signals(task: asyncio.Task[object]) -> None:
    """From now on, SIGINT and SIGTERM set STOP and cancel `task` (the scenario); call inside the running loop."""
    loop = asyncio.get_running_loop()

    def stop(signum: signal.Signals) -> None:
        if not STOP.is_set():
            print(f"bench: {signum.name}: stopping, tearing the stack down", flush=True)
        STOP.set()
        task.cancel()

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop, signum)
