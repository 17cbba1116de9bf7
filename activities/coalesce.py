"""Group commit for work many threads ask for at once: one run serves every caller that asked before it began.

The PodCliqueSet's availableReplicas is recounted (activities/status.mirror_pcs: a GET, two LISTs, maybe a PATCH and
a confirming LIST) after each replica's availability changes. Replicas of one PCS tend to change together, and each
recount read everything again: about 9 of B3's 23 requests per replica (issue 17). A caller only needs a recount
that *began after it asked* (its own PodClique write came before), so callers that ask while a recount runs share
the next one, and callers that ask while nothing runs start one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")


@dataclass
class _Run:
    done: bool = False
    result: Any = None
    error: BaseException | None = None


class GroupCommit(Generic[T]):
    """`run(key, fn)` returns the result of a call of `fn` that began after `run` was called; concurrent callers of
    one key share calls. At most one call per key runs at a time; a caller waiting for a call that nobody runs yet
    runs it itself, so no caller runs more than one call and none waits on a stream of others' work."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._running: set[Hashable] = set()
        self._next: dict[Hashable, _Run] = {}  # per key: the call that will begin next, and who waits for it
        self.calls = 0  # calls of fn made (for tests and metrics)
        self.requests = 0  # run() calls served

    def run(self, key: Hashable, fn: Callable[[], T]) -> T:
        with self._lock:
            self.requests += 1
            mine = self._next.setdefault(key, _Run())
            while not mine.done:
                if key in self._running:
                    self._lock.wait()
                    continue
                # Nobody runs this key, and `mine` has not begun (a begun call is never in _next): run it.
                self._next.pop(key)
                self._running.add(key)
                self.calls += 1
                self._lock.release()
                try:
                    mine.result = fn()
                except BaseException as exc:  # every caller that shared the call sees its failure
                    mine.error = exc
                finally:
                    self._lock.acquire()
                    self._running.discard(key)
                    mine.done = True
                    self._lock.notify_all()
        if mine.error is not None:
            raise mine.error
        result: T = mine.result
        return result
