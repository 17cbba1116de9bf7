"""What the workflow histories say: every terminate_gang activity (when it was scheduled, with which request, whether
it completed) and every observation the workflow decided on, across the whole continue-as-new chain.

Histories are the product's memory and its record of what it did; they are read here straight from the Temporal
server, run by run (a closed run never changes, so it is fetched once).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from temporalio.api.common.v1 import Payloads
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHistory

from worker.history_activities import decoded, local_activity
from workflows.contract import (
    ENSURE_REPLICA,
    ENSURE_REPLICA_CACHED,
    ENSURE_REPLICA_RELEASING,
    OBSERVE_REPLICA,
    OBSERVE_REPLICA_CACHED,
    RECREATE_FOR_UPDATE,
    TERMINATE_GANG,
)
from workflows.messages import (
    EnsureResult,
    RecreateRequest,
    RecreateResult,
    ReplicaSnapshot,
    TerminateRequest,
    TerminateResult,
)

T = TypeVar("T")
OBSERVES = (OBSERVE_REPLICA, OBSERVE_REPLICA_CACHED)  # a round's read, from the apiserver or the watch cache
# materialising, whose result replaces the round's read
ENSURES = (ENSURE_REPLICA, ENSURE_REPLICA_CACHED, ENSURE_REPLICA_RELEASING)


@dataclass(frozen=True)
class TerminateCall:
    """One terminate_gang activity as the history records it."""

    workflow_id: str
    run_id: str
    event_id: int
    scheduled_at: datetime  # server time of ActivityTaskScheduled
    request: TerminateRequest
    completed_at: datetime | None  # server time of ActivityTaskCompleted; None while in flight (or failed)
    healed: str = ""  # the result's: a read of the activity's own showed the breach healed, nothing was deleted

    @property
    def completed(self) -> bool:
        return self.completed_at is not None

    @property
    def carried_out(self) -> bool:
        """Completed, and it deleted (or found gone) what it named: a termination the workflow counts."""
        return self.completed and not self.healed

    @property
    def key(self) -> str:
        return f"{self.workflow_id}@{self.run_id}#{self.event_id}"


@dataclass(frozen=True)
class RecreateCall:
    """One recreate-for-update activity (a rolling update's deletions) as the history records it."""

    workflow_id: str
    run_id: str
    event_id: int
    scheduled_at: datetime
    request: RecreateRequest
    read_at: datetime | None = None  # when the read the step was decided on was scheduled (observe or ensure)
    deferred: frozenset[str] = frozenset()  # "Pod/<name>", "PodClique/<name>": left by the activity's own recheck

    def asked(self) -> tuple[dict[str, str], dict[str, str]]:
        """(pods, PodCliques) name -> UID this step deleted or found gone: the request less what was deferred."""
        return ({n: u for n, u in self.request.pods.items() if f"Pod/{n}" not in self.deferred},
                {n: u for n, u in self.request.cliques.items() if f"PodClique/{n}" not in self.deferred})


@dataclass(frozen=True)
class ReadDigest:
    read_at: datetime
    short: frozenset[str] | None  # UIDs of the PodClique incarnations short of minAvailable (None: no topology)
    missing: bool = False  # a PodClique of the topology was not there at all


@dataclass
class RunDigest:
    """What one run's history holds that the checks need."""

    run_id: str
    previous_run_id: str | None
    closed: bool
    terminations: list[TerminateCall] = field(default_factory=list)
    available_uids: set[str] = field(default_factory=set)  # PodClique UIDs an evaluated observation saw available
    observations: int = 0
    recreations: list[RecreateCall] = field(default_factory=list)  # scheduled (deletions may have happened)
    # Deletions (terminate_gang, recreate_for_update) scheduled while the read in force came from the watch cache:
    # each is a decision taken on cached state alone (issue 17 forbids it). Event ids.
    decided_on_cache: list[int] = field(default_factory=list)
    # Every read a round decided on: when it was taken (read_at, the activity's clock) and what it showed short.
    reads: list[ReadDigest] = field(default_factory=list)


@dataclass
class WorkflowDigest:
    workflow_id: str
    runs: list[RunDigest]  # oldest first

    @property
    def terminations(self) -> list[TerminateCall]:
        return [t for run in self.runs for t in run.terminations]

    @property
    def available_uids(self) -> set[str]:
        return {uid for run in self.runs for uid in run.available_uids}

    @property
    def recreations(self) -> list[RecreateCall]:
        return [r for run in self.runs for r in run.recreations]

    @property
    def reads(self) -> list[ReadDigest]:
        return [r for run in self.runs for r in run.reads]


def digest_events(workflow_id: str, run_id: str, events: list[HistoryEvent]) -> RunDigest:
    """Walk one run's events in order.

    The snapshot a round decides on is the observe_replica result, unless ensure_replica ran next (then its
    result replaces it), so an observation counts as evaluated once the next activity is known not to be ensure."""
    previous: str | None = None
    closed = False
    scheduled: dict[int, tuple[str, HistoryEvent]] = {}
    digest = RunDigest(run_id=run_id, previous_run_id=None, closed=False)
    pending: ReplicaSnapshot | None = None
    read_at: datetime | None = None  # the latest observe/ensure read that completed: what a step is decided on
    from_cache = False  # whether that read came from the watch cache

    def evaluated(snapshot: ReplicaSnapshot) -> None:
        digest.observations += 1
        topology = snapshot.topology
        if topology is None:
            digest.reads.append(ReadDigest(snapshot.read_at, None))
            return
        short, missing = set(), False
        for unit in topology.cliques:
            state = snapshot.cliques.get(unit.name)
            if state is not None and not state.terminating and state.ready >= unit.min_available:
                digest.available_uids.add(state.uid)
            elif state is not None:
                short.add(state.uid)
            else:
                missing = True
        digest.reads.append(ReadDigest(snapshot.read_at, frozenset(short), missing))

    def on_scheduled(name: str) -> None:
        nonlocal pending
        if pending is not None:
            if name not in ENSURES:
                evaluated(pending)
            pending = None

    def on_read(name: str, scheduled_at: datetime, result: Payloads) -> None:
        nonlocal pending, read_at, from_cache
        read_at = scheduled_at
        if name in OBSERVES:
            pending = decoded(result, ReplicaSnapshot)
            from_cache = pending.from_cache
        else:
            ensured = decoded(result, EnsureResult).snapshot
            evaluated(ensured)
            from_cache = ensured.from_cache

    for event in events:
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            previous = event.workflow_execution_started_event_attributes.continued_execution_run_id or None
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            name = attrs.activity_type.name
            scheduled[event.event_id] = (name, event)
            if name in (TERMINATE_GANG, RECREATE_FOR_UPDATE) and from_cache:
                digest.decided_on_cache.append(event.event_id)
            if name == RECREATE_FOR_UPDATE:
                digest.recreations.append(RecreateCall(workflow_id, run_id, event.event_id,
                                                       event.event_time.ToDatetime(tzinfo=UTC),
                                                       decoded(attrs.input, RecreateRequest), read_at))
            on_scheduled(name)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attrs_done = event.activity_task_completed_event_attributes
            name, scheduled_event = scheduled.get(attrs_done.scheduled_event_id, ("", event))
            if name in OBSERVES + ENSURES:
                on_read(name, scheduled_event.event_time.ToDatetime(tzinfo=UTC), attrs_done.result)
            elif name == RECREATE_FOR_UPDATE:
                deferred = frozenset(decoded(attrs_done.result, RecreateResult).deferred)
                digest.recreations = [dataclasses.replace(r, deferred=deferred)
                                      if r.event_id == attrs_done.scheduled_event_id else r
                                      for r in digest.recreations]
            elif name == TERMINATE_GANG:
                digest.terminations.append(_call(workflow_id, run_id, scheduled_event,
                                                 completed_at=event.event_time.ToDatetime(tzinfo=UTC),
                                                 healed=decoded(attrs_done.result, TerminateResult).healed))
        elif (local := local_activity(event)) is not None:  # scheduled and completed in one marker
            on_scheduled(local.name)
            if local.name in OBSERVES + ENSURES and local.result is not None:
                on_read(local.name, local.scheduled_at or event.event_time.ToDatetime(tzinfo=UTC), local.result)
        elif kind in (EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
                      EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
                      EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
                      EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
                      EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT,
                      EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED):
            closed = True
    if pending is not None:
        evaluated(pending)  # the last round went on without another activity
    done = {t.event_id for t in digest.terminations}
    for event_id, (name, event) in scheduled.items():
        if name == "terminate_gang" and event_id not in done:
            digest.terminations.append(_call(workflow_id, run_id, event, completed_at=None))
    digest.terminations.sort(key=lambda t: t.event_id)
    digest.previous_run_id = previous
    digest.closed = closed
    return digest


def _call(workflow_id: str, run_id: str, event: HistoryEvent, *, completed_at: datetime | None,
          healed: str = "") -> TerminateCall:
    attrs = event.activity_task_scheduled_event_attributes
    return TerminateCall(
        workflow_id=workflow_id, run_id=run_id, event_id=event.event_id,
        scheduled_at=event.event_time.ToDatetime(tzinfo=UTC),
        request=decoded(attrs.input, TerminateRequest), completed_at=completed_at, healed=healed,
    )


class HistoryReader:
    """Reads workflow chains; closed runs are cached. Every history read is also queued for a replay check, a
    closed run once, an open run each time it is read again."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self._closed: dict[str, RunDigest] = {}
        self.to_replay: dict[str, WorkflowHistory] = {}  # run id -> the history last read

    async def workflow(self, workflow_id: str) -> WorkflowDigest:
        description = await self.client.get_workflow_handle(workflow_id).describe()
        runs: list[RunDigest] = []
        run_id: str | None = description.run_id
        while run_id:
            run = self._closed.get(run_id)
            if run is None:
                history = await self.client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
                self.to_replay[run_id] = history
                run = digest_events(workflow_id, run_id, list(history.events))
                if run.closed:
                    self._closed[run_id] = run
            runs.append(run)
            run_id = run.previous_run_id
        return WorkflowDigest(workflow_id, list(reversed(runs)))


def write_history(history: WorkflowHistory, path: Path) -> Path:
    """Write `history` as JSON with its workflow id beside the events (what tests/histories.py's `load` reads back):
    the one format of replay fixtures, incident fixtures and the histories a fault run could not replay."""
    body = json.loads(history.to_json())
    body["workflowId"] = history.workflow_id
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(body, indent=1, sort_keys=False) + "\n")
    return path
