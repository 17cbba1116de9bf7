"""Every recorded workflow history (tests/fixtures/histories/, written by `pytest tests/e2e --record-histories`)
replays against today's workflow code without a non-determinism error.

The fixture set must keep covering the paths that matter for determinism: a plain start to Available, a PCS-replica
and a PCSG-replica gang termination, pause/resume, a force-terminate update, both sides of a continue-as-new, a
scale-in to completion, the reconciler, pods started in their startup order, a rolling update step of a replica and
the rollout workflow, a hand-over after an update, and a termination its activity found healed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from tests.histories import FIXTURES, load, replayer
from worker.history_activities import activity_names, input_baseline, patches_in
from workflows.contract import (
    NUDGE_VERSIONS_HEADER,
    RECREATE_FOR_UPDATE,
    RELEASE_GATES,
    RELEASE_STARTUP,
    REPLICA_WORKFLOW,
    ROLLOUT_REPORT_SIGNAL,
    ROLLOUT_TURN_SIGNAL,
    ROLLOUT_WORKFLOW,
)
from workflows.patches import NEWEST_INPUT_BASELINE
from workflows.replica import UPDATE_HANDOVER_PATCH, ReplicaWorkflow
from workflows.signals import HISTORY_EVENTS_PER_RUN, QUIET_HANDOVER_PATCH

FIXTURE_FILES = sorted(FIXTURES.glob("*.json"))


def _activities(history: WorkflowHistory) -> set[str]:
    return set(activity_names(list(history.events)))  # local ones included


def _updates(history: WorkflowHistory) -> set[str]:
    return {e.workflow_execution_update_accepted_event_attributes.accepted_request.input.name
            for e in history.events if e.HasField("workflow_execution_update_accepted_event_attributes")}


def _signals(history: WorkflowHistory) -> set[str]:
    return {e.workflow_execution_signaled_event_attributes.signal_name for e in history.events
            if e.HasField("workflow_execution_signaled_event_attributes")}


def _has(field: str) -> Callable[[HistoryEvent], bool]:
    return lambda e: e.HasField(field)


def _terminations(history: WorkflowHistory) -> list[str]:
    """The scope of each terminate_gang call, from its input payload."""
    scopes = []
    for e in history.events:
        if e.HasField("activity_task_scheduled_event_attributes") and \
                e.activity_task_scheduled_event_attributes.activity_type.name == "terminate_gang":
            payload = e.activity_task_scheduled_event_attributes.input.payloads[0].data
            scopes.append(json.loads(payload)["scope"])
    return scopes


def _terminations_found_healed(history: WorkflowHistory) -> int:
    """terminate_gang calls whose result says a read of the activity's own showed the breach healed."""
    scheduled = {e.event_id: e.activity_task_scheduled_event_attributes.activity_type.name for e in history.events
                 if e.HasField("activity_task_scheduled_event_attributes")}
    results = [json.loads(done.result.payloads[0].data) for e in history.events
               if e.HasField("activity_task_completed_event_attributes")
               and scheduled.get((done := e.activity_task_completed_event_attributes).scheduled_event_id)
               == "terminate_gang"]
    return sum(1 for result in results if result.get("healed"))


def _workflow_type(history: WorkflowHistory) -> str:
    return history.events[0].workflow_execution_started_event_attributes.workflow_type.name


COVERAGE: dict[str, Callable[[WorkflowHistory], bool]] = {
    "start to Available": lambda h: _workflow_type(h) == REPLICA_WORKFLOW and RELEASE_GATES in _activities(h)
    and not _terminations(h),
    "PCS-replica termination": lambda h: "pcs-replica" in _terminations(h),
    "PCSG-replica termination": lambda h: "pcsg-replica" in _terminations(h),
    "pause and resume": lambda h: {"pause", "resume"} <= (_updates(h) | _signals(h)),
    "force-terminate update": lambda h: "force_terminate" in _updates(h),
    "ends in continue-as-new": lambda h: any(map(_has("workflow_execution_continued_as_new_event_attributes"),
                                                 h.events)),
    "started by continue-as-new": lambda h: bool(
        h.events[0].workflow_execution_started_event_attributes.continued_execution_run_id),
    "scale-in to completion": lambda h: any(map(_has("workflow_execution_completed_event_attributes"), h.events))
    and "delete_replica" in _activities(h),
    "reconciler": lambda h: _workflow_type(h) == "ReconcilerWorkflow",
    "startup order": lambda h: RELEASE_STARTUP in _activities(h),
    "rolling update step": lambda h: RECREATE_FOR_UPDATE in _activities(h) and ROLLOUT_TURN_SIGNAL in _signals(h),
    "rollout workflow": lambda h: _workflow_type(h) == ROLLOUT_WORKFLOW and ROLLOUT_REPORT_SIGNAL in _signals(h),
    "nudges with resourceVersions": lambda h: any(_versioned_nudge(e) for e in h.events),
    "hand-over after the task that took an update": lambda h: UPDATE_HANDOVER_PATCH in patches_in(list(h.events)),
    # Under input baseline 17 the patch is taken in, marker or not: a run that ended in continue-as-new short of the cap.
    "hand-over when quiet": lambda h: QUIET_HANDOVER_PATCH in patches_in(list(h.events))
    and h.events[-1].HasField("workflow_execution_continued_as_new_event_attributes")
    and len(h.events) < HISTORY_EVENTS_PER_RUN,
    "a termination found healed, then a new breach's": lambda h: _terminations_found_healed(h) > 0
    and len(_terminations(h)) > 1,
    "deadlines kept in the memo": lambda h: any(map(_has("workflow_properties_modified_event_attributes"), h.events)),
    "a replica run under the baseline in its input": lambda h: input_baseline(h.events[0]) == NEWEST_INPUT_BASELINE,
}


def _versioned_nudge(event: HistoryEvent) -> bool:
    return event.HasField("workflow_execution_signaled_event_attributes") and \
        NUDGE_VERSIONS_HEADER in event.workflow_execution_signaled_event_attributes.header.fields


def test_the_fixtures_cover_every_path_that_matters() -> None:
    histories = {path.stem: load(path) for path in FIXTURE_FILES}
    missing = [what for what, covers in COVERAGE.items() if not any(covers(h) for h in histories.values())]
    assert not missing, f"no recorded history covers: {missing}; re-record with `pytest tests/e2e --record-histories`"


@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandboxed", "unsandboxed"])
@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: Path(p).stem)
async def test_recorded_history_replays_deterministically(path: Path, sandboxed: bool) -> None:
    """In Temporal's sandbox (its runtime checks) and without it, as the worker runs by default."""
    result = await replayer(sandboxed=sandboxed).replay_workflow(load(path), raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure}"


async def test_a_replayer_that_does_not_read_the_nudge_versions_header_diverges() -> None:
    """Every Replayer must be given NudgeVersionsInterceptor (tests/histories.py, worker/doctor.py, the fault
    runner): without it the nudges of a watcher an hour behind are judged by its clock, the replay takes fewer
    rounds than the run did, and fails."""
    history = load(FIXTURES / "skewed_watcher_versioned_nudges.json")
    blind = Replayer(workflows=[ReplicaWorkflow], data_converter=pydantic_data_converter)
    result = await blind.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is not None
    assert "nondetermin" in str(result.replay_failure).lower(), result.replay_failure
