"""After kube-apiserver could not be reached: try again as soon as it answers, not after a back-off that has grown.

Temporal's retry policy (1 s, doubling up to 30 s) suits a request that fails; it does not suit an outage. After a
kube-apiserver outage of half a minute every attempt was up to 30 s apart, so a gang termination that fell due during
it came up to 30 s after kube-apiserver was back (the fault runs measured 27 s and 38 s). So an attempt that found
kube-apiserver unreachable waits, within its own time, until kube-apiserver answers /readyz again, and then asks
Temporal for the next attempt at once (ApplicationError.next_retry_delay overrides the policy's back-off). Whatever
the number of attempts waiting, one thread of the worker probes at a time, twice a second, so an outage costs the
recovering apiserver two requests a second per worker, not one per waiting replica.

What each attempt does is unchanged: a deletion still acts only on what its own attempt reads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta

PROBE_EVERY_SECONDS = 0.5
PROBE_TIMEOUT_SECONDS = 1.0
# The next attempt, once kube-apiserver answers: at once (for an activity, not a local one, Temporal's server made
# it about a second on the dev server here).
RETRY_WHEN_BACK = timedelta(milliseconds=100)
# The next attempt while it is still down: an activity's at once (its attempt waited as long as it could, and
# retries cost no history). A local activity holds its replica's workflow task open while it runs, and a status query
# waits meanwhile (docs/limitations.md), so its attempt waits 2 s at most; its next one comes on a workflow timer,
# above the replica workflow's local retry threshold (2 s) so the task closes in between, and later attempts come
# further apart: each costs the history a timer and a workflow task (five events).
RETRY_WHILE_DOWN = timedelta(seconds=1)
LOCAL_WAIT_SECONDS = 2.0
RETRY_WHILE_DOWN_LOCAL = (timedelta(seconds=3), timedelta(seconds=6), timedelta(seconds=10))


def retry_while_down(*, local: bool, attempt: int) -> timedelta:
    """The next attempt's delay after an attempt (numbered from 1) that waited for kube-apiserver in vain."""
    if not local:
        return RETRY_WHILE_DOWN
    return RETRY_WHILE_DOWN_LOCAL[min(max(attempt, 1), len(RETRY_WHILE_DOWN_LOCAL)) - 1]


class Reachability:
    """Whether kube-apiserver answers again; shared by every activity thread of one worker."""

    def __init__(self, probe: Callable[[float], bool]) -> None:
        self._probe = probe  # (timeout in seconds) -> True when /readyz answered 200
        self._changed = threading.Condition()
        self._probing = False
        self._answered_at = float("-inf")  # when the last probe that kube-apiserver answered began
        self._next_probe_at = float("-inf")

    def wait(self, seconds: float, beat: Callable[[], None] | None = None,
             given_up: Callable[[], bool] | None = None) -> bool:
        """Block until kube-apiserver answers a probe begun after this call, at most `seconds`; True when it did.
        `beat` is called about twice a second while waiting (an activity's heartbeat); the wait ends unanswered as
        soon as `given_up` says so (the activity was cancelled, the worker shuts down)."""
        began = time.monotonic()
        deadline = began + max(0.0, seconds)
        while True:
            waited = False
            if given_up is not None and given_up():
                return False
            with self._changed:
                if self._answered_at >= began:
                    return True
                now = time.monotonic()
                if now >= deadline:
                    return False
                if self._probing or now < self._next_probe_at:  # a probe is under way or was just made
                    self._changed.wait(min(max(self._next_probe_at - now, 0.05), PROBE_EVERY_SECONDS, deadline - now))
                    waited = True
                else:
                    self._probing = True
                    probed_at = now
                    self._next_probe_at = now + PROBE_EVERY_SECONDS
            if waited:
                if beat is not None:
                    beat()
                continue
            answered = False
            try:
                answered = self._probe(min(PROBE_TIMEOUT_SECONDS, max(0.1, deadline - probed_at)))
            finally:
                with self._changed:
                    self._probing = False
                    if answered:
                        self._answered_at = max(self._answered_at, probed_at)
                    self._changed.notify_all()
