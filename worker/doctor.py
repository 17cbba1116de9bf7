"""Stuck replica workflows: find them, say why, and reset them to their last good workflow task.

A replica workflow whose workflow tasks keep failing makes no progress at all: no round, no timer, no control is
served, and Temporal retries the task forever. Two causes are seen in practice:

- a **nondeterminism error**: the history holds commands that the code now running does not issue at that point
  (the round-52 incident in tests/fixtures/incidents/, or a worker build that was rolled back after it ran);
- **the code raises** on every attempt (a bug in a new build).

Finding them: Temporal's visibility reports workflows with failing workflow tasks in the system search attribute
`TemporalReportedProblems` (`category=WorkflowTaskFailed`, `category=WorkflowTaskTimedOut`); where a server does
not know that attribute, `doctor` describes every running replica workflow and the worker's periodic check a batch
of them per check, in turn (`Sweep`). Each candidate is then described (the pending workflow task's attempt count)
and its history read for the failure.

Healing: Temporal's reset (ResetWorkflowExecution) starts a new run of the same workflow id from a point of the
history; signals and updates received after that point are reapplied, so no control or nudge is lost. The point
is found by replaying the history with the code of this build: the last workflow task whose history still
replays is kept and redone, everything after it is discarded and decided again by the current code (activities
are idempotent; what the discarded part did in Kubernetes is observed again by the next round).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.workflowservice.v1 import ResetWorkflowExecutionRequest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.runtime import Runtime, TelemetryConfig
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

from activities.metrics import STUCK_WORKFLOWS
from worker.history_activities import local_activity
from workflows.contract import REPLICA_WORKFLOW, quote, replica_query

log = logging.getLogger(__name__)

STUCK_AFTER_ATTEMPTS = 3  # a workflow task failed this many times in a row: stuck, not a passing hiccup
TIMED_OUT = "TIMED_OUT"  # the cause shown for a workflow task that timed out (WorkflowTaskTimedOut has no failure)
PROBLEMS_ATTRIBUTE = "TemporalReportedProblems"
PROBLEM_CATEGORIES = ("category=WorkflowTaskFailed", "category=WorkflowTaskTimedOut")
DESCRIBE_CONCURRENCY = 16
RESET_IDENTITY = "grove-temporal reset"

_WT_FINISHED = (
    EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT,
)
_NAMED_EVENT = re.compile(r"HistoryEvent\(id: (\d+), (\w+)")


class DoctorError(Exception):
    """Something the doctor or reset cannot do; the message says why (naming the argument where one is at fault)."""


@dataclass(frozen=True)
class StuckWorkflow:
    workflow_id: str
    run_id: str
    attempts: int  # attempts of the pending workflow task so far
    failing_since: datetime | None
    cause: str  # WorkflowTaskFailedCause without its prefix, e.g. NON_DETERMINISTIC_ERROR, WORKFLOW_WORKER_UNHANDLED_FAILURE
    message: str  # the failure's message (first line)
    failed_event_id: int | None  # the WorkflowTaskFailed event in the history (written at the first failed attempt)
    failing_event: str  # the history event the failure names, e.g. "292 ActivityTaskScheduled"; "" if none

    def as_dict(self) -> dict[str, object]:
        return {
            "workflowId": self.workflow_id, "runId": self.run_id, "attempts": self.attempts,
            "failingSince": self.failing_since.isoformat() if self.failing_since else None, "cause": self.cause,
            "message": self.message, "failedEventId": self.failed_event_id, "failingEvent": self.failing_event,
        }


def named_event(message: str) -> str:
    """The history event a nondeterminism message names ("... HistoryEvent(id: 292, ActivityTaskScheduled)")."""
    match = _NAMED_EVENT.search(message)
    return f"{match.group(1)} {match.group(2)}" if match else ""


def _cause_name(cause: WorkflowTaskFailedCause.ValueType) -> str:
    try:
        name = WorkflowTaskFailedCause.Name(cause)
    except ValueError:  # a cause newer than this SDK
        return str(int(cause))
    return name.removeprefix("WORKFLOW_TASK_FAILED_CAUSE_")


def _last_task_problem(events: Sequence[HistoryEvent]) -> HistoryEvent | None:
    for event in reversed(events):
        if event.event_type in (EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED,
                                EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT):
            return event
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            return None  # a task completed after the last failure: that failure is over
    return None


# --- finding ----------------------------------------------------------------------------------------------------
async def reported_problems(client: Client, namespace: str | None) -> list[str] | None:
    """Running replica workflows visibility reports with workflow-task problems; None where the server lacks the
    attribute (Temporal servers before 1.30, among them the CLI's dev server)."""
    base = replica_query(namespace=namespace)
    problems = ", ".join(quote(p) for p in PROBLEM_CATEGORIES)
    try:
        return [e.id async for e in client.list_workflows(f"{base} AND {PROBLEMS_ATTRIBUTE} IN ({problems})")]
    except RPCError as err:
        if err.status != RPCStatusCode.INVALID_ARGUMENT:
            raise
        log.debug("visibility has no %s (%s)", PROBLEMS_ATTRIBUTE, err)
    return None


async def running_replicas(client: Client, namespace: str | None) -> list[str]:
    return [e.id async for e in client.list_workflows(replica_query(namespace=namespace))]


async def _candidates(client: Client, namespace: str | None) -> list[str]:
    """What visibility reports, or every running replica workflow where it cannot."""
    reported = await reported_problems(client, namespace)
    return reported if reported is not None else await running_replicas(client, namespace)


class Sweep:
    """Which running workflows a periodic check describes where visibility cannot name the failing ones: a batch
    per check, in workflow-id order, the next batch where the last one ended, so that a fleet of any size costs the
    same per check and each workflow is described once every ceil(running / batch) checks. Describing all of them
    each minute cost 1,000 DescribeWorkflowExecution calls a minute at 1,000 replicas (6% of a busy worker's
    samples). Workflows found stuck are described every time, to see them heal."""

    def __init__(self, batch: int) -> None:
        self.batch = batch
        self._described: set[str] = set()  # in the current pass

    def next(self, running: Sequence[str], stuck: Sequence[str]) -> list[str]:
        alive = set(running)
        self._described &= alive
        pending = sorted(alive - self._described)
        if not pending:  # a pass is complete: begin the next
            self._described.clear()
            pending = sorted(alive)
        chosen = pending[:self.batch]
        self._described.update(chosen)
        return sorted({*chosen, *(w for w in stuck if w in alive)})


async def diagnose(client: Client, workflow_id: str, *, min_attempts: int = STUCK_AFTER_ATTEMPTS,
                   run_id: str | None = None) -> StuckWorkflow | None:
    """The workflow's failing task, if its pending workflow task has failed at least `min_attempts` times."""
    handle = client.get_workflow_handle(workflow_id, run_id=run_id)
    description = await handle.describe()
    if description.status != WorkflowExecutionStatus.RUNNING:
        return None
    pending = description.raw_description.pending_workflow_task
    attempts = pending.attempt if description.raw_description.HasField("pending_workflow_task") else 0
    if attempts < min_attempts:
        return None
    history = await handle.fetch_history()
    cause, message, failed_event_id = task_problem(history.events)
    since = pending.original_scheduled_time.ToDatetime() if pending.HasField("original_scheduled_time") else None
    first_line = message.splitlines()[0] if message else ""
    return StuckWorkflow(
        workflow_id=workflow_id, run_id=description.run_id or "", attempts=attempts, failing_since=since,
        cause=cause, message=first_line, failed_event_id=failed_event_id, failing_event=named_event(message),
    )


def task_problem(events: Sequence[HistoryEvent]) -> tuple[str, str, int | None]:
    """(cause, message, event id) of the last workflow task problem still going on; empty when there is none."""
    problem = _last_task_problem(events)
    if problem is None:
        return "", "", None
    if problem.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
        # No failure to read: the worker did not answer within the task timeout. Nothing in the history is wrong, so a
        # reset does not help; it passes once tasks finish in time (a long replay on a busy worker is the usual cause).
        return TIMED_OUT, (f"workflow task timed out after {_task_timeout(events)}: the worker did not finish it in "
                           "time (a long replay on a busy worker?); no reset needed, it passes once the worker keeps "
                           "up"), problem.event_id
    attrs = problem.workflow_task_failed_event_attributes
    return _cause_name(attrs.cause), attrs.failure.message, problem.event_id


def _task_timeout(events: Sequence[HistoryEvent]) -> str:
    started = next((e for e in events if e.HasField("workflow_execution_started_event_attributes")), None)
    if started is None:
        return "its timeout"
    return f"{started.workflow_execution_started_event_attributes.workflow_task_timeout.ToTimedelta().total_seconds():g}s"


async def find_stuck(client: Client, *, namespace: str | None = None,
                     min_attempts: int = STUCK_AFTER_ATTEMPTS) -> list[StuckWorkflow]:
    """Running replica workflows whose current workflow task has failed at least `min_attempts` times."""
    return await describe_stuck(client, await _candidates(client, namespace), min_attempts=min_attempts)


async def describe_stuck(client: Client, candidates: Sequence[str], *,
                         min_attempts: int = STUCK_AFTER_ATTEMPTS) -> list[StuckWorkflow]:
    limit = asyncio.Semaphore(DESCRIBE_CONCURRENCY)

    async def one(workflow_id: str) -> StuckWorkflow | None:
        async with limit:
            try:
                return await diagnose(client, workflow_id, min_attempts=min_attempts)
            except RPCError as err:
                if err.status == RPCStatusCode.NOT_FOUND:  # completed since it was listed
                    return None
                raise

    found = await asyncio.gather(*(one(w) for w in candidates))
    return sorted((s for s in found if s is not None), key=lambda s: s.workflow_id)


class StuckMonitor:
    """The worker's periodic check: the gauge, a /readyz detail, and one warning per workflow that becomes stuck
    (and one line when it is no longer)."""

    def __init__(self, client: Client, *, namespace: str | None, min_attempts: int = STUCK_AFTER_ATTEMPTS,
                 leading: Callable[[], bool] = lambda: True, sweep_batch: int = 100) -> None:
        self.client = client
        self.namespace = namespace
        self.min_attempts = min_attempts
        self.leading = leading  # only one worker checks (describing every replica is not free)
        self.sweep = Sweep(sweep_batch)
        self.stuck: list[StuckWorkflow] = []
        self.checked = False
        self.swept: tuple[int, int] | None = None  # (described, running) of the last check, where it swept

    async def check(self) -> list[StuckWorkflow]:
        candidates = await reported_problems(self.client, self.namespace)
        if candidates is None:
            running = await running_replicas(self.client, self.namespace)
            if self.swept is None:
                log.info("visibility cannot name replica workflows with failing tasks (no %s): checking %d "
                         "running ones at most %d per check", PROBLEMS_ATTRIBUTE, len(running), self.sweep.batch)
            candidates = self.sweep.next(running, [s.workflow_id for s in self.stuck])
            self.swept = (len(candidates), len(running))
        else:
            self.swept = None
        found = await describe_stuck(self.client, candidates, min_attempts=self.min_attempts)
        before = {s.workflow_id for s in self.stuck}
        for s in found:
            if s.workflow_id not in before:
                if s.cause == TIMED_OUT:
                    log.warning("replica workflow %s is stuck: workflow task tried %d times since %s; %s",
                                s.workflow_id, s.attempts, s.failing_since, s.message)
                    continue
                log.warning("replica workflow %s is stuck: workflow task failed %d times since %s (%s: %s%s); "
                            "see `grove-temporal doctor`, heal with `grove-temporal reset`", s.workflow_id,
                            s.attempts, s.failing_since, s.cause, s.message,
                            f"; failing event {s.failing_event}" if s.failing_event else "")
        for workflow_id in sorted(before - {s.workflow_id for s in found}):
            log.info("replica workflow %s makes progress again", workflow_id)
        self.stuck, self.checked = found, True
        STUCK_WORKFLOWS.set(len(found))
        return found

    def summary(self) -> str:
        """For /readyz: informational (a stuck workflow is not a reason to take this worker out of service)."""
        if not self.leading():
            return "checked by the leading worker"
        if not self.checked:
            return "not checked yet"
        if not self.stuck:
            if self.swept is not None and self.swept[0] < self.swept[1]:
                return f"ok ({self.swept[0]} of {self.swept[1]} running replica workflows described per check)"
            return "ok"
        shown = ", ".join(f"{s.workflow_id} ({s.cause or 'failing'})" for s in self.stuck[:5])
        more = f" and {len(self.stuck) - 5} more" if len(self.stuck) > 5 else ""
        return f"{len(self.stuck)} stuck: {shown}{more}"

    async def run(self, every_seconds: float, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                if self.leading():
                    await self.check()
                elif self.checked:  # another worker leads now: it reports them (the gauge sums over workers)
                    self.stuck, self.checked = [], False
                    STUCK_WORKFLOWS.set(0)
            except RPCError as err:  # Temporal unreachable: nothing known, nothing changed
                log.debug("stuck-workflow check skipped: %s", err)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every_seconds)


# --- resetting --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ResetPlan:
    """Where to reset to and why: `event_id` is the finishing event (completed/failed/timed out) of the last
    workflow task that still replays; that task is redone and every later event is discarded."""

    event_id: int
    task_started_event_id: int
    replay_error: str  # what replaying the whole history with this build reported
    discarded_events: int
    discarded_activities: dict[str, int]  # activity type -> completed in the discarded part
    reapplied_signals: int
    reapplied_updates: int

    def as_dict(self) -> dict[str, object]:
        return {
            "eventId": self.event_id, "taskStartedEventId": self.task_started_event_id,
            "replayError": self.replay_error, "discardedEvents": self.discarded_events,
            "discardedActivities": self.discarded_activities, "reappliedSignals": self.reapplied_signals,
            "reappliedUpdates": self.reapplied_updates,
        }


def _replayer() -> Replayer:
    from workflows.nudge_versions import NudgeVersionsInterceptor
    from workflows.reconciler import ReconcilerWorkflow
    from workflows.replica import ReplicaWorkflow

    quiet = Runtime(telemetry=TelemetryConfig(logging=None))  # the CLI reports replay failures itself
    return Replayer(workflows=[ReplicaWorkflow, ReconcilerWorkflow], data_converter=pydantic_data_converter,
                    interceptors=[NudgeVersionsInterceptor()], runtime=quiet)


def has_a_workflow_task(history: WorkflowHistory) -> bool:
    """Whether a replay of `history` has anything to run. A run read between its start (a new replica, a
    continue-as-new) and its first workflow task holds its start event alone, and temporalio's Replayer (1.35) never
    returns from such a history, not even when cancelled: it held an e2e test for its whole 900 s. Every replay of a
    history read from the server asks this first."""
    return any(e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED for e in history.events)


async def replay_error(history: WorkflowHistory, replayer: Replayer | None = None) -> BaseException | None:
    if not has_a_workflow_task(history):
        return None  # nothing to replay (has_a_workflow_task)
    result = await (replayer or _replayer()).replay_workflow(history, raise_on_replay_failure=False)
    return result.replay_failure


def _prefix(history: WorkflowHistory, last_event_id: int) -> WorkflowHistory:
    return WorkflowHistory(history.workflow_id, [e for e in history.events if e.event_id <= last_event_id])


def _message(error: BaseException) -> str:
    text = str(error)
    inner = re.search(r'message: "([^"]*)"', text)  # the core's Failure { message: "..." } wrapper
    return inner.group(1) if inner else text.splitlines()[0][:500]


async def find_reset_point(history: WorkflowHistory) -> ResetPlan:
    """The last workflow task of `history` up to which this build replays it (bisection over the workflow tasks:
    a prefix that ends at a task's start is what a worker sees when it picks that task up)."""
    replayer = _replayer()
    error = await replay_error(history, replayer)
    if error is None:
        raise DoctorError("the history replays cleanly with this build: a reset would not change what the workers "
                          "decide. If workers fail it, they run a different build (deploy this one), or name a "
                          "point yourself with --event-id")
    if not isinstance(error, NondeterminismError):
        raise DoctorError(f"this build fails the workflow itself, not on its history ({_message(error)}): a reset "
                          "cannot help; deploy a build that does not fail (or name a point with --event-id)")
    starts = [e.event_id for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED]
    finished = {e.event_id for e in history.events if e.event_type in _WT_FINISHED}
    starts = [s for s in starts if s + 1 in finished]  # tasks that finished (a task's end event follows its start)
    if not starts:
        raise DoctorError("the history has no finished workflow task to reset to")
    low, high = -1, len(starts)  # invariant: prefix to starts[low] replays (or low = -1), to starts[high] does not
    while high - low > 1:
        middle = (low + high) // 2
        if await replay_error(_prefix(history, starts[middle]), replayer) is None:
            low = middle
        else:
            high = middle
    if low < 0:
        raise DoctorError("not even the first workflow task replays with this build: a reset cannot help")
    started = starts[low]
    return _plan(history, started + 1, started, _message(error))


def plan_at(history: WorkflowHistory, event_id: int) -> ResetPlan:
    """An operator-named reset point: it must end a workflow task of this run."""
    by_id = {e.event_id: e for e in history.events}
    event = by_id.get(event_id)
    if event is None or event.event_type not in _WT_FINISHED:
        ends = [e.event_id for e in history.events if e.event_type in _WT_FINISHED][-5:]
        raise DoctorError(f"--event-id {event_id}: not the end of a workflow task in this run (completed, failed "
                          f"or timed out); the last ones are {', '.join(map(str, ends)) or 'none'}")
    return _plan(history, event_id, event_id - 1, "")


def _plan(history: WorkflowHistory, event_id: int, started: int, error: str) -> ResetPlan:
    later = [e for e in history.events if e.event_id > started]
    activities = Counter(
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED and e.event_id > started
        and any(c.activity_task_completed_event_attributes.scheduled_event_id == e.event_id for c in later
                if c.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED)
    )
    activities.update(local.name for e in later if (local := local_activity(e)) is not None and local.result is not None)
    signals = sum(1 for e in later if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED)
    updates = sum(1 for e in later if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED)
    return ResetPlan(event_id=event_id, task_started_event_id=started, replay_error=error,
                     discarded_events=len(later), discarded_activities=dict(sorted(activities.items())),
                     reapplied_signals=signals, reapplied_updates=updates)


@dataclass(frozen=True)
class ResetOutcome:
    workflow_id: str
    old_run_id: str
    new_run_id: str | None  # None for a dry run
    plan: ResetPlan
    stuck: StuckWorkflow | None

    @property
    def signals_may_be_held(self) -> bool:
        """Temporal writes a signal that arrives while a workflow task is running into the history only once that
        task ends. A stuck workflow's task is retried over and over, so signals sent meanwhile may be missing from
        the history the plan counted; the reset reapplies them all the same (tests/e2e/test_stuck_workflows.py)."""
        return self.stuck is not None and self.stuck.attempts > 1

    def as_dict(self) -> dict[str, object]:
        return {"workflowId": self.workflow_id, "oldRunId": self.old_run_id, "newRunId": self.new_run_id,
                **self.plan.as_dict(), "signalsMayBeHeld": self.signals_may_be_held,
                "stuck": self.stuck.as_dict() if self.stuck else None}


async def reset(client: Client, workflow_id: str, *, reason: str, event_id: int | None = None,
                dry_run: bool = False) -> ResetOutcome:
    """Reset a replica workflow to its last good workflow task (or `event_id`); signals and updates received
    after that point are reapplied to the new run."""
    handle = client.get_workflow_handle(workflow_id)
    try:
        description = await handle.describe()
    except RPCError as err:
        raise DoctorError(f"{workflow_id}: {err.message}") from err
    if description.workflow_type != REPLICA_WORKFLOW:
        raise DoctorError(f"{workflow_id} is a {description.workflow_type}, not a replica workflow")
    if description.status != WorkflowExecutionStatus.RUNNING:
        raise DoctorError(f"{workflow_id} is not running ({description.status.name.lower() if description.status else '?'})")
    run_id = description.run_id or ""
    history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
    stuck = await diagnose(client, workflow_id, run_id=run_id, min_attempts=1)
    plan = plan_at(history, event_id) if event_id is not None else await find_reset_point(history)
    if dry_run:
        return ResetOutcome(workflow_id, run_id, None, plan, stuck)
    response = await client.workflow_service.reset_workflow_execution(ResetWorkflowExecutionRequest(
        namespace=client.namespace,
        workflow_execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id),
        reason=reason,
        workflow_task_finish_event_id=plan.event_id,
        request_id=str(uuid.uuid4()),
        identity=RESET_IDENTITY,
        # default reapply: every signal and update received after the reset point goes to the new run
    ))
    log.warning("reset replica workflow %s run %s to event %d (%s): new run %s", workflow_id, run_id, plan.event_id,
                reason, response.run_id)
    return ResetOutcome(workflow_id, run_id, response.run_id, plan, stuck)
