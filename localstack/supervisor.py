"""Restart stack processes that exit on their own, as kubelet restarts a cluster's static pods.

Seen on the local stack: kube-scheduler exits with status 1 by design when its cache turns out inconsistent
("Pod updated on a different node than previously added to"), which a kube-apiserver outage can cause. In a real
cluster kubelet would start it again; under `grove-temporal run` nobody did, and pods stayed Pending. The same goes
for the worker (a Deployment would restart it) and every other component.

The backoff follows kubelet's CrashLoopBackOff, shortened for a laptop: the first restart after `initial` seconds,
doubling up to `cap`; a process that stayed up for `stable_after` seconds starts again from `initial`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol


class Supervised(Protocol):
    def running(self) -> bool: ...

    def exit_description(self) -> str: ...


@dataclass
class _State:
    delay: float  # the wait before the next restart
    due: float | None = None  # when the pending restart is due; None: none pending
    started: float | None = None  # when this supervisor last (re)started it
    restarts: int = 0


@dataclass
class Supervisor:
    processes: Callable[[], Mapping[str, Supervised]]
    restart: Callable[[str], object]  # starts the named process again (and may wait until it is ready)
    log: Callable[[str], None]
    clock: Callable[[], float] = time.monotonic
    initial: float = 1.0
    cap: float = 60.0
    stable_after: float = 120.0
    _states: dict[str, _State] = field(default_factory=dict)

    def restarts(self) -> dict[str, int]:
        return {name: state.restarts for name, state in self._states.items() if state.restarts}

    def tick(self) -> None:
        """Look at every process once: schedule a restart for any that died, carry out the restarts now due."""
        for name, process in self.processes().items():
            state = self._states.setdefault(name, _State(self.initial))
            now = self.clock()
            if process.running():
                if state.started is not None and now - state.started >= self.stable_after:
                    state.delay, state.started = self.initial, None
                continue
            if state.due is None:
                state.due = now + state.delay
                self.log(f"warning: {process.exit_description()}\n"
                         f"restarting {name} in {state.delay:.0f}s (restart {state.restarts + 1})")
            if now < state.due:
                continue
            state.due, state.restarts = None, state.restarts + 1
            state.delay = min(state.delay * 2, self.cap)
            try:
                self.restart(name)
            except Exception as error:  # noqa: BLE001 - a failed restart is retried with a longer wait, not fatal
                self.log(f"warning: restarting {name} failed: {error}")
                continue
            state.started = self.clock()
            self.log(f"{name} restarted (restart {state.restarts})")
