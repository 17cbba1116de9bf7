"""Waiting for kube-apiserver to answer again: one probe at a time per worker, at most two a second, and only an
answer to a probe begun after the wait began counts (the probe here is a function of ours; the real one, /readyz
against a stopped and restarted kube-apiserver, is in tests/faults/test_outage_retry.py)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from activities.reachability import PROBE_EVERY_SECONDS, Reachability


class Probe:
    """Answers from `up_at` (monotonic) on; records when each probe began and how many ran at once."""

    def __init__(self, up_at: float) -> None:
        self.up_at = up_at
        self.began: list[float] = []
        self.running = 0
        self.most_at_once = 0
        self._lock = threading.Lock()

    def __call__(self, timeout: float) -> bool:
        with self._lock:
            self.began.append(time.monotonic())
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
        time.sleep(0.02)  # a refused connection takes a moment too
        with self._lock:
            self.running -= 1
        return time.monotonic() >= self.up_at


def test_many_waiting_attempts_share_one_probe_at_a_time_and_all_return_when_it_answers() -> None:
    probe = Probe(up_at=time.monotonic() + 1.6)
    reachability = Reachability(probe)
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda _: reachability.wait(10.0), range(16)))
    assert answers == [True] * 16
    assert probe.most_at_once == 1
    gaps = [b - a for a, b in zip(probe.began, probe.began[1:], strict=False)]
    assert all(gap >= PROBE_EVERY_SECONDS - 0.01 for gap in gaps), gaps
    assert 3 <= len(probe.began) <= 6, probe.began  # ~1.6 s of outage at two probes a second, not 16 waiters' worth


def test_a_wait_ends_unanswered_when_its_time_is_up_and_beats_meanwhile() -> None:
    probe = Probe(up_at=float("inf"))
    beats: list[float] = []
    began = time.monotonic()
    assert Reachability(probe).wait(1.2, beat=lambda: beats.append(time.monotonic())) is False
    assert 1.2 <= time.monotonic() - began < 2.0
    assert 2 <= len(probe.began) <= 4
    assert beats, "an activity waiting this long heartbeats"


def test_an_answer_from_before_the_wait_began_does_not_count() -> None:
    answers = iter([True, False, False, True])
    calls: list[float] = []

    def probe(timeout: float) -> bool:
        calls.append(time.monotonic())
        return next(answers)

    reachability = Reachability(probe)
    assert reachability.wait(1.0) is True  # answered at once
    time.sleep(0.05)
    # kube-apiserver went away since: the earlier answer says nothing; this wait probes until it answers again.
    assert reachability.wait(3.0) is True
    assert len(calls) == 4


def test_a_cancelled_attempt_stops_waiting_at_once() -> None:
    cancelled = threading.Event()
    threading.Timer(0.3, cancelled.set).start()
    began = time.monotonic()
    assert Reachability(Probe(up_at=float("inf"))).wait(10.0, given_up=cancelled.is_set) is False
    assert time.monotonic() - began < 1.5, "not the whole 10 s"
