"""worker/history_activities.py, event_kinds and task_waits: where a history's events go and how long its workflow
tasks waited in their queues, as the benchmarks print them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from temporalio.api.enums.v1 import EventType, TimeoutType
from temporalio.api.history.v1 import HistoryEvent

from tests.bench.test_once import local_marker, local_release, release
from worker.history_activities import (
    TaskRound,
    TaskWait,
    event_kinds,
    heartbeat_tasks,
    idle_tasks,
    read_only_tasks,
    task_rounds,
    task_waits,
)


def _event(event_id: int, kind: EventType.ValueType) -> HistoryEvent:
    return HistoryEvent(event_id=event_id, event_type=kind)


def _signal(event_id: int, name: str) -> HistoryEvent:
    event = _event(event_id, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED)
    event.workflow_execution_signaled_event_attributes.signal_name = name
    return event


def test_activities_local_activities_and_signals_are_counted_by_name() -> None:
    task = [_event(1, EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED), _event(2, EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED),
            _event(3, EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)]
    activity = release(4, {"s0-0-app-0": "pod-1"}, "a")
    activity[1].activity_task_started_event_attributes.scheduled_event_id = 4  # as a real history's started event
    events = [*task, *activity, _signal(7, "nudge"), _signal(8, "nudge"), local_release(9, {"s0-0-app-0": "pod-1"}),
              _signal(10, "pause"), _event(11, EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT)]
    events[-1].workflow_task_timed_out_event_attributes.timeout_type = TimeoutType.TIMEOUT_TYPE_SCHEDULE_TO_START
    assert event_kinds(events) == {
        "WORKFLOW_TASK_SCHEDULED": 1, "WORKFLOW_TASK_STARTED": 1, "WORKFLOW_TASK_COMPLETED": 1,
        "activity:release_gates": 3, "signal:nudge": 2, "local:release_gates": 1, "signal:pause": 1,
        "WORKFLOW_TASK_TIMED_OUT:SCHEDULE_TO_START": 1,
    }


def test_an_activity_event_whose_scheduling_is_not_in_the_history_is_named_unknown() -> None:
    completed = release(4, {"s0-0-app-0": "pod-1"}, "a")[2]  # its scheduled event belongs to an earlier page
    assert event_kinds([completed]) == {"activity:?": 1}


def _at(event: HistoryEvent, seconds: float, scheduled_id: int | None = None) -> HistoryEvent:
    event.event_time.FromDatetime(datetime(2026, 12, 3, tzinfo=UTC) + timedelta(seconds=seconds))
    if scheduled_id is not None:
        event.workflow_task_started_event_attributes.scheduled_event_id = scheduled_id
    return event


def test_task_waits_are_timed_from_each_tasks_scheduling_and_a_wait_after_a_sticky_timeout_is_marked() -> None:
    """The queue wait of each workflow task started; a task scheduled again after its sticky queue's timeout waited
    that long on the shared queue (as seen in B3 under a creation wave: 6 to 48 s)."""
    events = [
        _at(_event(1, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED), 0.0),
        _at(_event(2, EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED), 0.0),
        _at(_event(3, EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED), 0.25, scheduled_id=2),
        _at(_event(4, EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED), 1.0),
        _at(_signal(5, "nudge"), 2.0),
        _at(_event(6, EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED), 2.0),
        _at(_event(7, EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT), 5.0),
        _at(_event(8, EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED), 5.0),
        _at(_signal(9, "nudge"), 6.0),
        _at(_event(10, EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED), 30.5, scheduled_id=8),
        _at(_event(11, EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED), 31.0),
    ]
    assert task_waits(events) == [TaskWait(0.25, False), TaskWait(25.5, True)]
    assert task_waits(events[:9]) == [TaskWait(0.25, False)], "a task not started yet has no wait"


def test_a_workflow_task_that_recorded_nothing_is_idle_and_one_that_read_or_waited_is_not() -> None:
    """The first task reads (a local activity's marker) and the second starts a timer: neither is idle. The third,
    for a nudge whose change the read had seen, records nothing, nor does the last, which ends the history."""
    marker, timer = EventType.EVENT_TYPE_MARKER_RECORDED, EventType.EVENT_TYPE_TIMER_STARTED
    completed, scheduled = EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED, EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED
    events = [_event(1, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED), _event(2, scheduled), _event(3, completed),
              _event(4, marker), _signal(5, "nudge"), _event(6, scheduled), _event(7, completed), _event(8, timer),
              _signal(9, "nudge"), _event(10, scheduled), _event(11, completed), _signal(12, "nudge"),
              _event(13, scheduled), _event(14, completed)]
    assert idle_tasks(events) == 2
    assert idle_tasks(events[:11]) == 1
    assert idle_tasks(events[:8]) == 0


def test_a_task_completed_only_to_keep_a_long_local_activity_going_is_a_heartbeat() -> None:
    """The first task's read outlasts 80% of the task timeout twice: two heartbeat tasks, then the read's marker. A
    task that records nothing for a nudge is idle, not a heartbeat: the next task waits for the next signal."""
    marker, completed = EventType.EVENT_TYPE_MARKER_RECORDED, EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    scheduled, started = EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED, EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED
    events = [_event(1, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED), _event(2, scheduled), _event(3, started),
              _event(4, completed), _event(5, scheduled), _event(6, started), _event(7, completed),
              _event(8, scheduled), _event(9, started), _event(10, completed), _event(11, marker),
              _signal(12, "nudge"), _event(13, scheduled), _event(14, started), _event(15, completed),
              _signal(16, "nudge"), _event(17, scheduled)]
    assert heartbeat_tasks(events) == 2
    assert idle_tasks(events) == 3  # an idle count takes the heartbeats in too
    assert heartbeat_tasks(events[:7]) == 1


def test_a_workflow_task_that_only_read_is_read_only_and_one_that_also_acted_or_did_nothing_is_not() -> None:
    """The first task reads and releases gates, the second only reads (a held status-only nudge), the third reads
    and upserts the phase, the fourth records nothing (idle, not read-only), the fifth reads twice."""
    completed, scheduled = EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED, EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED
    upsert = EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES
    read = "observe_replica_cached"
    events = [_event(1, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED), _event(2, scheduled), _event(3, completed),
              local_marker(4, read, {}), local_release(5, {"s0-0-app-0": "pod-1"}),
              _signal(6, "nudge"), _event(7, scheduled), _event(8, completed), local_marker(9, read, {}),
              _signal(10, "nudge"), _event(11, scheduled), _event(12, completed), local_marker(13, read, {}),
              _event(14, upsert), _signal(15, "nudge"), _event(16, scheduled), _event(17, completed),
              _signal(18, "nudge"), _event(19, scheduled), _event(20, completed), local_marker(21, read, {}),
              local_marker(22, "observe_replica", {})]
    reads = frozenset({read, "observe_replica"})
    assert read_only_tasks(events, reads) == 2
    assert read_only_tasks(events[:17], reads) == 1
    assert read_only_tasks(events, frozenset({"observe_replica"})) == 0, "a read not named is not a read"



def test_each_completed_task_is_listed_with_the_signals_that_came_before_it_and_what_it_recorded() -> None:
    """Task one (the start) reads and sets a timer; two nudges wake task two, which reads and upserts the phase; a
    pause wakes task three, which records nothing; a nudge after the last task woke none yet."""
    completed, scheduled = EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED, EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED
    events = [_at(_event(1, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED), 0.0), _at(_event(2, scheduled), 0.0),
              _at(_event(3, completed), 1.0), local_marker(4, "observe_replica_cached", {}),
              _event(5, EventType.EVENT_TYPE_TIMER_STARTED), _signal(6, "nudge"), _signal(7, "nudge"),
              _event(8, scheduled), _at(_event(9, completed), 12.5), local_marker(10, "observe_replica_cached", {}),
              _event(11, EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES), _signal(12, "pause"),
              _event(13, scheduled), _at(_event(14, completed), 20.0), _signal(15, "nudge")]
    start = datetime(2026, 12, 3, tzinfo=UTC)
    assert task_rounds(events) == [
        TaskRound(start + timedelta(seconds=1), (), ("local:observe_replica_cached", "TIMER_STARTED")),
        TaskRound(start + timedelta(seconds=12.5), ("nudge", "nudge"),
                  ("local:observe_replica_cached", "UPSERT_WORKFLOW_SEARCH_ATTRIBUTES")),
        TaskRound(start + timedelta(seconds=20), ("pause",), ()),
    ]
    assert task_rounds(events[:11]) == task_rounds(events)[:2] and task_rounds(events[:1]) == []
