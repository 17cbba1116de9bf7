"""The activities a workflow history records, local ones included.

An activity leaves ACTIVITY_TASK_SCHEDULED / STARTED / COMPLETED events. A local activity (workflows/contract.py,
LOCAL_ACTIVITIES) leaves a single MARKER_RECORDED event, named core_local_activity by the SDK's core, whose details
hold a JSON "data" payload (activity type, attempt, original schedule time) and the "result" payloads. Readers of
histories (the doctor, the fault runner's invariants, tests) go through this module so both count the same.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import pairwise
from typing import TypeVar

from temporalio.api.common.v1 import Payloads
from temporalio.api.enums.v1 import EventType, TimeoutType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.contrib.pydantic import pydantic_data_converter

T = TypeVar("T")
LOCAL_ACTIVITY_MARKER = "core_local_activity"


@dataclass(frozen=True)
class LocalActivityRecord:
    """One local activity as its marker records it (only completed ones, or ones that failed for good, leave one)."""

    name: str
    attempt: int
    scheduled_at: datetime | None  # the first attempt's schedule time
    result: Payloads | None  # None if it failed


def local_activity(event: HistoryEvent) -> LocalActivityRecord | None:
    """The local activity this event records, or None if it records none."""
    if event.event_type != EventType.EVENT_TYPE_MARKER_RECORDED:
        return None
    marker = event.marker_recorded_event_attributes
    if marker.marker_name != LOCAL_ACTIVITY_MARKER or "data" not in marker.details:
        return None
    data = json.loads(marker.details["data"].payloads[0].data)
    scheduled = data.get("original_schedule_time") or {}
    scheduled_at = (datetime.fromtimestamp(int(scheduled.get("seconds", 0)) + int(scheduled.get("nanos", 0)) / 1e9,
                                           tz=UTC) if scheduled else None)
    failed = marker.HasField("failure")
    result = marker.details["result"] if "result" in marker.details and not failed else None
    return LocalActivityRecord(name=str(data.get("activity_type", "")), attempt=int(data.get("attempt", 1)),
                               scheduled_at=scheduled_at, result=result)


def decoded(payloads: Payloads, kind: type[T]) -> T:
    """An activity's input or result, as the worker's data converter (pydantic) wrote it."""
    values = pydantic_data_converter.payload_converter.from_payloads(list(payloads.payloads), [kind])
    return values[0]  # type: ignore[no-any-return]


def activity_names(events: list[HistoryEvent]) -> list[str]:
    """Every activity the history scheduled and every local activity it recorded, in order."""
    names: list[str] = []
    for event in events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            names.append(event.activity_task_scheduled_event_attributes.activity_type.name)
        elif (local := local_activity(event)) is not None:
            names.append(local.name)
    return names


PATCH_MARKER = "core_patch"


def patches_in(events: list[HistoryEvent]) -> set[str]:
    """The patches the history's run took: each patch marker's id, and for the replica baseline (a marker, or the
    number in the run's input) every patch it stands for (workflows/patches.py)."""
    from workflows.replica import RECORDED_BASELINES, REPLICA_BASELINES

    found: set[str] = set()
    for event in events:
        if (event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED
                and (number := input_baseline(event)) is not None):
            found |= RECORDED_BASELINES.get(number, frozenset())
        marker = event.marker_recorded_event_attributes
        if event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED and marker.marker_name == PATCH_MARKER:
            found.add(str(json.loads(marker.details["patch-data"].payloads[0].data)["id"]))
    for baseline, covers in REPLICA_BASELINES:
        if baseline in found:
            found |= covers
    return found


def input_baseline(started: HistoryEvent) -> int | None:
    """The patch baseline number in a replica run's input (ReplicaInput.baseline); None for any other input."""
    payloads = started.workflow_execution_started_event_attributes.input.payloads
    try:
        value = json.loads(payloads[0].data).get("baseline") if payloads else None
    except (ValueError, AttributeError):  # not a JSON object: not a replica's input
        return None
    return value if isinstance(value, int) else None


def event_kinds(events: list[HistoryEvent]) -> dict[str, int]:
    """How many events of each kind a history holds, finer than the event type where that says why: an activity by
    its name (`activity:<name>`, counting its scheduled, started and completed events), a local activity by its name
    (`local:<name>`), a signal by its name (`signal:<name>`), a patch marker as `patch`, a workflow task timeout by
    its kind (`WORKFLOW_TASK_TIMED_OUT:SCHEDULE_TO_START`); every other event by its type
    (`WORKFLOW_TASK_COMPLETED`). The benchmarks print it to show where a replica's history events go."""
    activity_of: dict[int, str] = {}  # scheduled event id -> activity name, filled as the events are read in order
    return dict(Counter(_kind(event, activity_of) for event in events))


# Events a workflow task's commands record right after its WORKFLOW_TASK_COMPLETED.
_COMMAND_EVENTS = frozenset({
    EventType.EVENT_TYPE_MARKER_RECORDED, EventType.EVENT_TYPE_TIMER_STARTED, EventType.EVENT_TYPE_TIMER_CANCELED,
    EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED,
    EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES, EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
    EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED,
    EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED,
    EventType.EVENT_TYPE_REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED,
})


def idle_tasks(events: list[HistoryEvent]) -> int:
    """Workflow tasks that completed having done nothing: no command, no local activity (nothing recorded right
    after their WORKFLOW_TASK_COMPLETED). A nudge whose change the workflow's last read had already seen costs one
    (its signal and the task's three events)."""
    return sum(1 for task in _completed_tasks(events) if not task.commands)


def heartbeat_tasks(events: list[HistoryEvent]) -> int:
    """Workflow tasks the SDK completed only to keep a task open while its local activities ran past 80% of the
    workflow task timeout: nothing recorded, and the next task scheduled right away, with no signal, timer or
    activity before it. Each costs three events (its COMPLETED, the next task's SCHEDULED and STARTED)."""
    return sum(1 for before, after in pairwise(events)
               if before.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
               and after.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED)


@dataclass
class _CompletedTask:
    completed: HistoryEvent  # its WORKFLOW_TASK_COMPLETED
    signals: list[HistoryEvent]  # the signals recorded since the task before it completed
    commands: list[HistoryEvent]  # the events its commands recorded right after its WORKFLOW_TASK_COMPLETED


def _completed_tasks(events: list[HistoryEvent]) -> list[_CompletedTask]:
    """Every completed workflow task in order: one scan for the idle, read-only and timeline readings below."""
    tasks: list[_CompletedTask] = []
    signals: list[HistoryEvent] = []
    current: _CompletedTask | None = None  # while its command events follow its COMPLETED
    for event in events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            current = _CompletedTask(event, signals, [])
            tasks.append(current)
            signals = []
        elif current is not None and event.event_type in _COMMAND_EVENTS:
            current.commands.append(event)
        else:
            current = None
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
                signals.append(event)
    return tasks


@dataclass(frozen=True)
class TaskWait:
    """How long one workflow task waited in a task queue, from its WORKFLOW_TASK_SCHEDULED to its STARTED."""

    seconds: float
    after_sticky_timeout: bool  # scheduled again on the shared queue after waiting out a sticky queue's timeout


def task_waits(events: list[HistoryEvent]) -> list[TaskWait]:
    """The queue wait of every workflow task the history shows started. One scheduled again after a sticky queue's
    schedule-to-start timeout is marked: its wait is the time it then spent on the shared task queue."""
    scheduled: dict[int, tuple[datetime, bool]] = {}  # scheduled event id -> when, and after a sticky timeout
    waits: list[TaskWait] = []
    previous = EventType.EVENT_TYPE_UNSPECIFIED
    for event in events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
            scheduled[event.event_id] = (event.event_time.ToDatetime(UTC),
                                         previous == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT)
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            at = scheduled.get(event.workflow_task_started_event_attributes.scheduled_event_id)
            if at is not None:
                waits.append(TaskWait((event.event_time.ToDatetime(UTC) - at[0]).total_seconds(), at[1]))
        previous = event.event_type
    return waits


def _kind(event: HistoryEvent, activity_of: dict[int, str]) -> str:
    kind = event.event_type
    if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
        activity_of[event.event_id] = event.activity_task_scheduled_event_attributes.activity_type.name
        return f"activity:{activity_of[event.event_id]}"
    for field in ("activity_task_started_event_attributes", "activity_task_completed_event_attributes",
                  "activity_task_failed_event_attributes", "activity_task_timed_out_event_attributes"):
        if event.HasField(field):
            return f"activity:{activity_of.get(getattr(event, field).scheduled_event_id, '?')}"
    if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
        return f"signal:{event.workflow_execution_signaled_event_attributes.signal_name}"
    if (local := local_activity(event)) is not None:
        return f"local:{local.name}"
    if kind == EventType.EVENT_TYPE_MARKER_RECORDED and event.marker_recorded_event_attributes.marker_name == PATCH_MARKER:
        return "patch"
    if kind == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:  # on a sticky queue (schedule to start) or running
        timeout = TimeoutType.Name(event.workflow_task_timed_out_event_attributes.timeout_type)
        return f"WORKFLOW_TASK_TIMED_OUT:{timeout.removeprefix('TIMEOUT_TYPE_')}"
    return EventType.Name(kind).removeprefix("EVENT_TYPE_")


def read_only_tasks(events: list[HistoryEvent], reads: frozenset[str]) -> int:
    """Workflow tasks whose only commands were reads: local activities named in `reads` and nothing else. A replica
    woken for a change that only moves its status (a pod bound or Ready) reads, finds nothing to decide, and writes
    its status inside that read (MirrorWithRead): such a task costs its signal, three task events and a marker."""
    return sum(1 for task in _completed_tasks(events)
               if task.commands and all((local := local_activity(c)) is not None and local.name in reads
                                        for c in task.commands))


@dataclass(frozen=True)
class TaskRound:
    """One completed workflow task, as a timeline shows it: when it completed, the signals that came since the task
    before it completed (what woke it, mostly), and what its commands recorded (event kinds, as `event_kinds`)."""

    completed_at: datetime
    signals: tuple[str, ...]
    commands: tuple[str, ...]


def task_rounds(events: list[HistoryEvent]) -> list[TaskRound]:
    """Every completed workflow task in order, with what woke it and what it did: the benchmarks print the rounds of
    their heaviest replicas, to show which changes cost a replica its extra history events."""
    activity_of: dict[int, str] = {}  # as event_kinds names activities: filled from their scheduled events, in order
    rounds = []
    for task in _completed_tasks(events):
        rounds.append(TaskRound(
            task.completed.event_time.ToDatetime(UTC),
            tuple(s.workflow_execution_signaled_event_attributes.signal_name for s in task.signals),
            tuple(_kind(c, activity_of) for c in task.commands)))
    return rounds
