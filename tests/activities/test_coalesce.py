"""activities/coalesce.GroupCommit: callers that ask while a call runs share the next call, which begins after
they asked; a failure reaches every caller of the call; keys do not wait on each other."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from activities.coalesce import GroupCommit


def test_callers_one_after_another_each_get_a_call_of_their_own() -> None:
    commit: GroupCommit[int] = GroupCommit()
    counter = iter(range(100))
    assert [commit.run("pcs", lambda: next(counter)) for _ in range(3)] == [0, 1, 2]
    assert commit.calls == 3


def test_callers_that_ask_during_a_call_share_the_next_one_which_begins_after_them() -> None:
    commit: GroupCommit[int] = GroupCommit()
    first_running, release_first = threading.Event(), threading.Event()
    began: list[float] = []
    asked: list[float] = []

    def call() -> int:
        began.append(time.monotonic())
        if len(began) == 1:
            first_running.set()
            release_first.wait(10)
        return len(began)

    def ask() -> int:
        asked.append(time.monotonic())
        return commit.run("pcs", call)

    with ThreadPoolExecutor(11) as pool:
        first = pool.submit(ask)
        assert first_running.wait(10)
        later = [pool.submit(ask) for _ in range(10)]
        while commit.requests < 11:  # all ten are waiting for the call after the running one
            time.sleep(0.01)
        release_first.set()
        assert first.result(10) == 1
        assert [f.result(10) for f in later] == [2] * 10
    assert commit.calls == 2
    assert began[1] > max(asked[1:]), "the shared call began after every caller that shares it asked"


def test_a_failed_call_fails_every_caller_that_shared_it_and_the_next_caller_calls_again() -> None:
    commit: GroupCommit[int] = GroupCommit()
    running, release = threading.Event(), threading.Event()
    calls = 0

    def call() -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            running.set()
            release.wait(10)
            return 1
        if calls == 2:
            raise RuntimeError("apiserver unavailable")
        return calls

    with ThreadPoolExecutor(4) as pool:
        first = pool.submit(commit.run, "pcs", call)
        assert running.wait(10)
        sharing = [pool.submit(commit.run, "pcs", call) for _ in range(3)]
        while commit.requests < 4:
            time.sleep(0.01)
        release.set()
        assert first.result(10) == 1
        for future in sharing:
            with pytest.raises(RuntimeError, match="apiserver unavailable"):
                future.result(10)
    assert commit.run("pcs", call) == 3


def test_keys_do_not_wait_for_each_other() -> None:
    commit: GroupCommit[str] = GroupCommit()
    hold = threading.Event()
    with ThreadPoolExecutor(2) as pool:
        blocked = pool.submit(commit.run, "a", lambda: (hold.wait(10), "a")[1])
        assert pool.submit(commit.run, "b", lambda: "b").result(5) == "b"
        hold.set()
        assert blocked.result(10) == "a"
