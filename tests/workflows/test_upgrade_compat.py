"""Upgrades: histories of workflows started by older releases still replay against today's code.

Replica workflows live as long as their PodCliqueSet, so a new release meets histories written by the old one.
Every change to the commands a workflow issues is guarded by `workflow.patched(<id>)` (docs/architecture.md, "Upgrading the
workflow safely"). These tests replay the frozen histories in tests/fixtures/histories/compat/ and show that the
guard is what keeps them replaying: forced onto the new path, the same histories fail as non-deterministic.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner

from tests.histories import FIXTURES, load, replayer
from workflows.contract import LOCAL_ACTIVITIES_PATCH
from workflows.patches import NEWEST_INPUT_BASELINE
from workflows.reconciler import ReconcilerWorkflow
from workflows.replica import (
    BREACH_EVENTS_PATCH,
    DEADLINE_MEMO_PATCH,
    ENSURE_RELEASES_BASE_PATCH,
    LOCAL_ENSURE_PATCH,
    LOCAL_RELEASES_PATCH,
    ONE_SAFETY_TIMER_PATCH,
    UPDATE_HANDOVER_PATCH,
    ReplicaWorkflow,
)
from workflows.signals import QUIET_HANDOVER_PATCH

COMPAT = sorted((FIXTURES / "compat").glob("*.json"))


def test_there_are_histories_from_before_each_patch() -> None:
    assert any(p.name.startswith("v0.1.0-") for p in COMPAT), "keep at least one pre-breach-events history"


@pytest.mark.parametrize("path", COMPAT, ids=lambda p: Path(p).stem)
async def test_older_history_replays_on_todays_code(path: Path) -> None:
    result = await replayer().replay_workflow(load(path), raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure}"


async def test_without_the_patch_guard_the_older_history_would_break(monkeypatch: pytest.MonkeyPatch) -> None:
    """Take the patch unconditionally (as an unguarded change would): the v0.1.0 history with a breach no longer
    replays. This is the failure `workflow.patched` prevents in production."""
    real = workflow.patched
    monkeypatch.setattr(workflow, "patched", lambda patch_id: True if patch_id == BREACH_EVENTS_PATCH else real(patch_id))
    unguarded = Replayer(workflows=[ReplicaWorkflow, ReconcilerWorkflow], data_converter=pydantic_data_converter,
                         workflow_runner=UnsandboxedWorkflowRunner())
    history = load(FIXTURES / "compat" / "v0.1.0-s8_heal_then_new_breach.json")
    result = await unguarded.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is not None
    assert "nondetermin" in str(result.replay_failure).lower(), result.replay_failure


async def _replay_forced(monkeypatch: pytest.MonkeyPatch, patch_id: str, fixture: str) -> str:
    """Replay a frozen history with `patch_id` taken unconditionally (as an unguarded change would); the failure."""
    real = workflow.patched
    monkeypatch.setattr(workflow, "patched", lambda asked: True if asked == patch_id else real(asked))
    result = await replayer().replay_workflow(load(FIXTURES / "compat" / fixture), raise_on_replay_failure=False)
    assert result.replay_failure is not None, f"{fixture} replays on the new path: the guard proves nothing"
    return str(result.replay_failure)


async def test_without_the_guard_a_run_begun_before_local_activities_would_break(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A run begun by the release before local activities and the patch baseline (cc9c238) replays on today's code
    (above); forced onto local activities, the same history fails: where it scheduled observe_replica_cached as an
    activity, today's code would record a local activity marker."""
    failure = await _replay_forced(monkeypatch, LOCAL_ACTIVITIES_PATCH, "pre-baseline-cc9c238-breach_termination.json")
    assert "nondetermin" in failure.lower(), failure


async def test_without_the_guard_a_run_with_a_timer_per_wait_would_break(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run begun before one-safety-timer started a safety-resync timer for each wait and cancelled it on the next
    nudge; forced onto the shared timer, its history no longer replays."""
    failure = await _replay_forced(monkeypatch, ONE_SAFETY_TIMER_PATCH, "baseline-1-85e0380-s1_start_to_available.json")
    assert "nondetermin" in failure.lower(), failure


async def test_without_the_guard_a_run_that_released_its_base_gang_in_a_second_activity_would_break(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A run begun before ensure-releases-base materialised with ensure_replica(_cached) and released the base gang
    with release_gates; forced onto the new path, its history no longer replays (the new path schedules
    ensure_replica_releasing there)."""
    failure = await _replay_forced(monkeypatch, ENSURE_RELEASES_BASE_PATCH, "baseline-6-ad36dab-s1_start_to_available.json")
    assert "nondetermin" in failure.lower(), failure


async def test_without_the_guard_a_run_that_released_gates_in_a_scheduled_activity_would_break(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A run begun under replica-baseline-7 (fffbad3) released the pods of the base gang left for after scheduling
    with a scheduled release_gates activity; it replays on today's code (above), and forced onto local releases its
    history no longer replays (today's code would record a local activity marker there)."""
    failure = await _replay_forced(monkeypatch, LOCAL_RELEASES_PATCH, "baseline-7-fffbad3-s1_start_to_available.json")
    assert "nondetermin" in failure.lower(), failure


async def test_without_the_guard_a_run_that_handed_over_in_the_task_that_took_an_update_would_break(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A run begun under replica-baseline-9 (5a41262) continued-as-new in the very workflow task that accepted a pause;
    it replays on today's code (above), and forced onto the new path its history no longer replays (today's code
    would start a timer there)."""
    failure = await _replay_forced(monkeypatch, UPDATE_HANDOVER_PATCH,
                                   "baseline-9-5a41262-update_accepted_in_handover_task.json")
    assert "nondetermin" in failure.lower(), failure


async def test_without_the_guard_a_run_that_materialised_in_a_scheduled_activity_would_break(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A run begun under replica-baseline-10 (ef84ba2) materialised with a scheduled ensure_replica_releasing; it
    replays on today's code (above), and forced onto local-ensure its history no longer replays (today's code would
    record a local activity marker there)."""
    failure = await _replay_forced(monkeypatch, LOCAL_ENSURE_PATCH, "baseline-10-ef84ba2-s1_start_to_available.json")
    assert "nondetermin" in failure.lower(), failure


async def test_without_the_guard_a_quiet_run_past_the_threshold_that_went_on_would_break(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A run begun under replica-baseline-9 (f9ecfbe) went on past QUIET_HISTORY_EVENTS while quiet (a PCSG replica
    terminated, recreated and Available again); it replays on today's code (above), and forced onto the quiet
    hand-over its history no longer replays (today's code would continue-as-new where it started a timer)."""
    failure = await _replay_forced(monkeypatch, QUIET_HANDOVER_PATCH, "baseline-9-f9ecfbe-s5_pcsg_replica_termination.json")
    assert "nondetermin" in failure.lower(), failure


async def test_without_the_guard_a_run_that_breached_before_the_deadline_memo_would_break(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A run begun under replica-baseline-9 (f9ecfbe) breached, counted its terminationDelay down and terminated a
    PCSG replica, with no memo; it replays on today's code (above), and forced onto the deadline memo its history no
    longer replays (today's code would modify the workflow's properties where the breach began)."""
    failure = await _replay_forced(monkeypatch, DEADLINE_MEMO_PATCH, "baseline-9-f9ecfbe-s5_pcsg_replica_termination.json")
    assert "nondetermin" in failure.lower(), failure


async def test_a_termination_scheduled_before_the_recheck_replays_with_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Why the recheck of a breach's termination (BreachRecheck) needs no patch: today's code schedules the same
    terminate_gang with a request that carries what it was decided on, and a replay does not compare an activity's
    input, so a history recorded before it replays. This test fails if that stops being so (a replay that compares
    inputs would need a patch). The run's commands then differ only after a result that says the breach healed,
    which no history recorded before it holds."""
    scheduled: list[object] = []
    real = workflow.execute_activity

    def recording(activity: object, *args: object, **kwargs: object) -> object:
        if activity == "terminate_gang":
            scheduled.append(args[0])
        return real(activity, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(workflow, "execute_activity", recording)
    history = load(FIXTURES / "compat" / "baseline-9-f9ecfbe-s5_pcsg_replica_termination.json")
    result = await replayer(sandboxed=False).replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure
    assert scheduled and all(getattr(request, "recheck", None) is not None for request in scheduled), scheduled


async def test_a_run_begun_under_a_marker_hands_over_under_the_input_baseline_and_replays(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Why writing the baseline number into the next run's input needs no patch: a run begun under the markers
    (baseline 1 here) continues as new with today's input, which carries the number, and a replay does not compare
    the input of a continue-as-new, so its history replays. This test fails if that stops being so."""
    handed: list[object] = []
    real = workflow.continue_as_new

    def recording(*args: object, **kwargs: object) -> object:
        handed.append(args[0] if args else kwargs.get("arg"))
        return real(*args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(workflow, "continue_as_new", recording)
    history = load(FIXTURES / "compat" / "baseline-1-85e0380-can_run_ends_in_continue_as_new.json")
    result = await replayer(sandboxed=False).replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure
    assert handed and all(getattr(given, "baseline", None) == NEWEST_INPUT_BASELINE for given in handed), handed
