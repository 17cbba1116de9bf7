"""How many replicas one worker materialises at once: enough to keep kube-apiserver busy, few enough that each one
finishes well inside its workflow task.

A new replica's first workflow task creates its objects in a local activity, and the task stays open while it runs.
One that runs past 80% of the workflow task timeout makes the SDK heartbeat the task: three more history events,
again every 80% after. Alone, a replica materialises well inside that; in a creation burst kube-apiserver is the
bottleneck, and by Little's law each materialisation then takes as long as the number running at once over the rate
they complete. At 1,000 replicas of 17 pods, with every workflow-task slot on a first task, that was 9.5 to 16 s:
one or two heartbeats, and 97 replicas of the 1,000 heartbeated in one run (docs/benchmarks.md). Running fewer at once does not slow the burst while
the rest still keep kube-apiserver saturated; it only stops each from waiting behind the others.

So the worker keeps a limit on materialisations running, led by what they take. After each that created something,
the limit moves a fifth of the way toward the number that would have made it take `target` at the same pace (limit
x target / took), between `floor` and `ceiling` (the workflow-task slots: no limit beyond today's). While as many run
as the limit allows, the worker's polls of the shared task queue wait (worker/slots.py): that is where new replicas'
first tasks come from. Polls of its sticky queue, for replicas it already holds, never wait. A worker that only
materialises small replicas, or few, keeps the limit at the ceiling; after a hand-over (no creation) nothing waits.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

from activities.metrics import MATERIALISE_LIMIT, MATERIALISING

FLOOR = 2  # the least the limit goes to: a materialisation slow on its own (kube-apiserver down) still lets others run
WEIGHT = 0.2  # how far one materialisation's time moves the limit: a burst's first crowd settles it in a few dozen


class CreationPace:
    """The limit and the count of materialisations running (module docstring); thread-safe, one per worker."""

    def __init__(self, ceiling: int, target_seconds: float, *, floor: int = FLOOR,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not 1 <= floor <= ceiling:
            raise ValueError(f"creation pace: floor {floor} must be between 1 and the ceiling {ceiling}")
        if target_seconds <= 0:
            raise ValueError(f"creation pace: target must be positive, got {target_seconds}")
        self.ceiling, self.floor, self.target = ceiling, floor, target_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._limit = float(ceiling)
        self._running = 0
        MATERIALISE_LIMIT.set(ceiling)

    @property
    def limit(self) -> int:
        with self._lock:
            return int(self._limit)

    @property
    def running(self) -> int:
        with self._lock:
            return self._running

    def full(self) -> bool:
        """As many materialisations run as the limit allows: new work should wait."""
        with self._lock:
            return self._running >= int(self._limit)

    @contextlib.contextmanager
    def materialising(self) -> Iterator[Callable[[bool], None]]:
        """Around one materialisation; call what it yields with whether it created anything. One that created
        nothing (everything was there) or failed says nothing of the pace and leaves the limit alone."""
        started = self._clock()
        outcome: list[bool] = []
        with self._lock:
            self._running += 1
            MATERIALISING.set(self._running)
        try:
            yield outcome.append
        finally:
            took = self._clock() - started
            with self._lock:
                self._running -= 1
                MATERIALISING.set(self._running)
                if outcome and outcome[-1]:
                    self._adapt(took)

    def _adapt(self, took: float) -> None:
        """Under the lock: a fifth of the way toward the limit that would have made this one take the target."""
        wanted = self._limit * self.target / max(took, 1e-3)
        self._limit = min(float(self.ceiling), max(float(self.floor),
                                                   (1 - WEIGHT) * self._limit + WEIGHT * wanted))
        MATERIALISE_LIMIT.set(int(self._limit))


@contextlib.contextmanager
def paced(pace: CreationPace | None) -> Iterator[Callable[[bool], None]]:
    """`pace.materialising()`, or nothing to count where the worker keeps no pace (tests, tools)."""
    if pace is None:
        yield lambda created: None
        return
    with pace.materialising() as done:
        yield done
