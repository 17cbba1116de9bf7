"""The reset point of a stuck replica workflow, found by replaying its history with this build: the kept round-52
incident (tests/fixtures/incidents/) resets to the workflow task whose commands the replay no longer issues."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory

from tests import histories
from worker.doctor import (
    TIMED_OUT,
    DoctorError,
    Sweep,
    _prefix,
    find_reset_point,
    has_a_workflow_task,
    named_event,
    plan_at,
    replay_error,
    task_problem,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
INCIDENT = FIXTURES / "incidents" / "nondeterminism-round52.json"


@pytest.mark.timeout(60)
async def test_a_run_read_before_its_first_workflow_task_is_not_replayed() -> None:
    """A run read right after it began (a continue-as-new as an e2e test ended) holds its start event alone, and
    temporalio's Replayer never returns from that, not even when cancelled: the test's whole 900 s went on one. Such
    a run has nothing to replay; one more event (its first task scheduled) and the Replayer answers."""
    events = list(histories.load(FIXTURES / "histories" / "s1_start_to_available.json").events)
    started_only = WorkflowHistory("started-only", events[:1])
    first_task = WorkflowHistory("first-task", events[:2])
    assert not has_a_workflow_task(started_only) and has_a_workflow_task(first_task)
    assert await replay_error(started_only) is None
    assert await replay_error(first_task) is None


async def test_the_round52_incident_resets_to_the_task_that_scheduled_the_unreplayable_activity() -> None:
    history = histories.load(INCIDENT)
    plan = await find_reset_point(history)
    by_id = {e.event_id: e for e in history.events}
    # Event 292 (ActivityTaskScheduled) is what replay trips over; the task completed at 291 issued it.
    assert "HistoryEvent(id: 292, ActivityTaskScheduled)" in plan.replay_error
    assert plan.event_id == 291 and by_id[291].event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    assert plan.task_started_event_id == 290
    assert await replay_error(_prefix(history, plan.task_started_event_id)) is None, "what is kept replays"
    assert await replay_error(_prefix(history, 296)) is not None, "the next task's start already does not"
    assert plan.discarded_events == len(history.events) - 290
    assert plan.discarded_activities == {"observe_replica": 1} and plan.reapplied_signals == 2


async def test_a_history_that_replays_is_not_reset_without_a_named_point() -> None:
    history = histories.load(FIXTURES / "histories" / "s1_start_to_available.json")
    with pytest.raises(DoctorError, match="replays cleanly with this build"):
        await find_reset_point(history)
    ends = [e.event_id for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED]
    plan = plan_at(history, ends[-1])
    assert plan.event_id == ends[-1] and plan.task_started_event_id == ends[-1] - 1 and plan.replay_error == ""
    with pytest.raises(DoctorError, match=r"--event-id 1: not the end of a workflow task"):
        plan_at(history, 1)


def test_the_failing_event_is_read_from_a_nondeterminism_message() -> None:
    message = ("[TMPRL1100] Nondeterminism error: Timer machine does not handle this event: "
               "HistoryEvent(id: 292, ActivityTaskScheduled)")
    assert named_event(message) == "292 ActivityTaskScheduled"
    assert named_event("RuntimeError: boom") == ""


def test_a_timed_out_task_is_named_as_such_and_not_sent_to_a_reset() -> None:
    """Fault run seed 12 logged "workflow task failed 3 times (: )" for replays that overran the task timeout."""
    from google.protobuf.duration_pb2 import Duration
    from temporalio.api.history.v1 import HistoryEvent

    started = HistoryEvent(event_id=1, event_type=EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED)
    started.workflow_execution_started_event_attributes.workflow_task_timeout.CopyFrom(Duration(seconds=10))
    timed_out = HistoryEvent(event_id=7, event_type=EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT)
    timed_out.workflow_task_timed_out_event_attributes.SetInParent()
    cause, message, event_id = task_problem([started, timed_out])
    assert (cause, event_id) == (TIMED_OUT, 7)
    assert "timed out after 10s" in message and "no reset needed" in message
    completed = HistoryEvent(event_id=8, event_type=EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)
    assert task_problem([started, timed_out, completed]) == ("", "", None), "over once a task completed"


def test_the_sweep_describes_a_batch_per_check_in_turn_and_keeps_the_stuck_ones() -> None:
    sweep = Sweep(batch=2)
    running = ["w1", "w2", "w3", "w4", "w5"]
    assert sweep.next(running, stuck=[]) == ["w1", "w2"]
    assert sweep.next(running, stuck=["w2"]) == ["w2", "w3", "w4"]
    # w5 completed, w0 started: the pass goes on with what runs now, and a stuck workflow that completed is dropped
    assert sweep.next(["w0", "w1", "w2", "w3", "w4"], stuck=["w2", "w5"]) == ["w0", "w2"]
    # every running workflow described once: the next pass begins at the start
    assert sweep.next(["w0", "w1", "w2", "w3", "w4"], stuck=[]) == ["w0", "w1"]
    assert Sweep(batch=100).next(running, stuck=[]) == running
