"""A status query that failed with a nondeterminism error (TMPRL1100), as one did when it raced a continue-as-new,
is asked again a few times; any other failure, and one that persists, reaches the operator."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.client import WorkflowQueryFailedError

from worker import replica_client
from worker.replica_client import query_status

RACED = "[TMPRL1100] Nondeterminism error: Missing associated machine for LocalActivity(3)"


class _Handle:
    def __init__(self, failures: list[str]) -> None:
        self.failures = failures
        self.calls = 0

    async def query(self, *args: Any, **kwargs: Any) -> str:
        self.calls += 1
        if self.failures:
            raise WorkflowQueryFailedError(self.failures.pop(0))
        return "status"


@pytest.fixture(autouse=True)
def no_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replica_client, "QUERY_RACE_RETRIES", (0.0, 0.0, 0.0))


async def test_a_query_that_raced_a_hand_over_is_answered_when_asked_again() -> None:
    handle = _Handle([RACED, RACED])
    assert await query_status(handle, str) == "status"  # type: ignore[arg-type]
    assert handle.calls == 3


async def test_any_other_query_failure_is_shown_at_once() -> None:
    handle = _Handle(["no such query: statuz"])
    with pytest.raises(WorkflowQueryFailedError, match="no such query"):
        await query_status(handle, str)  # type: ignore[arg-type]
    assert handle.calls == 1


async def test_a_nondeterminism_error_that_persists_is_shown_after_the_retries() -> None:
    handle = _Handle([RACED] * 10)
    with pytest.raises(WorkflowQueryFailedError, match="TMPRL1100"):
        await query_status(handle, str)  # type: ignore[arg-type]
    assert handle.calls == 4
