"""How busy the workers' workflow-task slots were during a recovery, read from history events (B5)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from temporalio.api.history.v1 import HistoryEvent

from bench.recovery_timeline import occupancy, task_spans

KILL = datetime(2026, 11, 28, 1, 0, tzinfo=UTC)


def _event(event_id: int, seconds: float, **attributes: dict[str, int]) -> HistoryEvent:
    event = HistoryEvent(event_id=event_id, **attributes)  # type: ignore[arg-type]
    event.event_time.FromDatetime(KILL + timedelta(seconds=seconds))
    return event


def test_each_started_task_is_paired_with_its_end_and_tasks_before_the_kill_are_left_out() -> None:
    events = [
        _event(3, -5.0, workflow_task_started_event_attributes={}),
        _event(4, -4.9, workflow_task_completed_event_attributes={"started_event_id": 3}),
        _event(8, 2.0, workflow_task_started_event_attributes={}),
        _event(9, 2.5, workflow_task_failed_event_attributes={"started_event_id": 8}),
        _event(11, 3.0, workflow_task_started_event_attributes={}),
        _event(12, 3.25, workflow_task_completed_event_attributes={"started_event_id": 11}),
        _event(14, 4.0, workflow_task_started_event_attributes={}),  # still running when read: no span
    ]
    assert task_spans(events, KILL.timestamp()) == [(2.0, 2.5), (3.0, 3.25)]


def test_occupancy_is_the_mean_number_of_tasks_in_progress_between_the_first_start_and_the_last_end() -> None:
    # two tasks side by side for 1 s, then one alone for 1 s: 3 task-seconds over 2 s
    found = occupancy([(0.0, 1.0), (0.0, 1.0), (1.0, 2.0)])
    assert found["tasks"] == 3 and found["mean_in_progress"] == 1.5
    assert (found["from_s"], found["to_s"]) == (0.0, 2.0)
    assert occupancy([]) == {"tasks": 0}
