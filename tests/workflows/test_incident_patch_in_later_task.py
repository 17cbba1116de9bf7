"""Fault run seed 7 (tests/fixtures/incidents/README.md): a replica run under input baseline 16 handed over quietly,
and its closed history did not replay. The run's code after a read of the watch cache ran one workflow task later
live (events 50-52) than the task its read's marker was recorded in (47-49); a replay runs it in that first task.
The hand-over was the same decision in both: judged as of the round's start (ROUND_START_RULE) the run was quiet at
61 counted events. But it asked the `quiet-handover` patch there, and a replay answers `patched` from the markers of
the task it is replaying: the marker sat in the later task, so the replay took the old path and found a marker it
had no command for.

Input baseline 17 takes that patch in: a quiet hand-over asks nothing and records no marker. The incident's history,
rewritten as a baseline 17 run would have written it (no marker, no TemporalChangeVersion upsert), replays with the
continue-as-new in the later task as live, and in the read's own task as a replay runs it."""

from __future__ import annotations

from pathlib import Path

from temporalio.client import WorkflowHistory

from tests.histories import regrouped, replay_failure
from workflows.patches import INPUT_BASELINE_16, INPUT_BASELINE_17

INCIDENT = Path(__file__).resolve().parents[1] / "fixtures" / "incidents" / "nondeterminism-patch-in-later-task-seed7.json"
READ_MARKER, PATCH_MARKER, PATCH_UPSERT, CONTINUED = 49, 53, 54, 55  # the later task is 50-52


def _history(order: list[int], *, baseline: int) -> WorkflowHistory:
    workflow_id, events = regrouped(INCIDENT, order, recorded_baseline=INPUT_BASELINE_16, baseline=baseline)
    return WorkflowHistory.from_json(workflow_id, {"events": events})


THROUGH_READ = list(range(1, READ_MARKER + 1))
AS_RECORDED = list(range(1, CONTINUED + 1))
# As a baseline 17 run writes it: the continue-as-new in the later task (the live grouping), or in the read's task.
LATER_TASK_17 = [event for event in AS_RECORDED if event not in (PATCH_MARKER, PATCH_UPSERT)]
READ_TASK_17 = [*THROUGH_READ, CONTINUED]


async def test_the_incident_as_recorded_does_not_replay() -> None:
    failure = await replay_failure(_history(AS_RECORDED, baseline=INPUT_BASELINE_16))
    assert failure is not None and "quiet-handover" in failure, failure


async def test_baseline_16_without_the_marker_does_not_replay_either() -> None:
    """Under 16 the run hands over only through the patch: a history without its marker has a continue-as-new the
    replay never asks for. The marker, not the decision, is what moved."""
    failure = await replay_failure(_history(LATER_TASK_17, baseline=INPUT_BASELINE_16))
    assert failure is not None and "ContinuedAsNew" in failure, failure


async def test_under_baseline_17_the_hand_over_replays_in_either_task() -> None:
    for order in (LATER_TASK_17, READ_TASK_17):
        assert await replay_failure(_history(order, baseline=INPUT_BASELINE_17)) is None, order
