"""Fault run seed 4, wider chaos (tests/fixtures/incidents/README.md): a nudge that came in while a round's last local
activity ran reached the workflow code before that activity's result live, and after it in every replay. The run
judged its quiet hand-over with the nudge counted live (52 events, past 50) and without it in a replay (48): the
replay failed with a nondeterminism error.

The incident's history is replayed here in both groupings, built from its own events: as recorded (the read's marker
in the task that ran it, the nudge in the next task) and as the live worker grouped it (the read's result arriving
with the nudge, after it). The second shape is a history Temporal writes when a local activity outlasts its task, and
the core replays it the way the live worker ran the incident. Under input baseline 16 (ROUND_START_RULE) both
groupings make the same decision: a hand-over where the round ends is judged as of the round's start."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import WorkflowHistory

from tests.histories import payload, regrouped, replay_failure, set_payload
from workflows import signals
from workflows.patches import INPUT_BASELINE_15, INPUT_BASELINE_16

INCIDENT = Path(__file__).resolve().parents[1] / "fixtures" / "incidents" / "nondeterminism-late-nudge-seed4-wider-chaos.json"
READ_MARKER, NUDGE, TASK_SCHEDULED, TASK_STARTED, TASK_COMPLETED = 48, 49, 50, 51, 52
HANDOVER = (53, 54, 55)  # the quiet-handover patch marker, its search attribute upsert, the continue-as-new


def _incident() -> dict[str, Any]:
    body: dict[str, Any] = json.loads(INCIDENT.read_text())
    return body


def _history(order: list[int], *, baseline: int, nudged_pod: int | None = None) -> WorkflowHistory:
    """The incident's events in `order` (ids as recorded), renumbered, under `baseline`; `nudged_pod`: the late
    nudge stands for this Pod resourceVersion (the read it races reached 1221)."""
    workflow_id, events = regrouped(INCIDENT, order, recorded_baseline=INPUT_BASELINE_15, baseline=baseline)
    if nudged_pod is not None and NUDGE in order:
        nudge = events[order.index(NUDGE)]
        header = nudge["workflowExecutionSignaledEventAttributes"]["header"]["fields"]["grove-temporal-nudge-versions"]
        assert payload(header) == {"Pod": 1220}
        set_payload(header, {"Pod": nudged_pod})
    return WorkflowHistory.from_json(workflow_id, {"events": events})


BEFORE = list(range(1, READ_MARKER))  # events 1-47: through the task that ran the round
# The read's result in the task that ran it, then the run hands over there: the nudge came after the run.
RECORDED = [*BEFORE, READ_MARKER, *HANDOVER]
# The task that ran the round completed without the read's result; the nudge came in, and the next task delivered
# both, the nudge first; the run hands over in it. The incident's own events, as its live worker ran them.
LIVE = [*BEFORE, NUDGE, TASK_SCHEDULED, TASK_STARTED, TASK_COMPLETED, READ_MARKER, *HANDOVER]
# A replay checks the decision through the patch marker: a run that asks no patch where the history holds one fails,
# and so does one that asks it where the history holds none. (A history that ends without a hand-over proves
# nothing: a replay takes `patched` as False where no marker was recorded.)


async def test_the_incident_as_recorded_does_not_replay() -> None:
    body = _incident()
    history = WorkflowHistory.from_json(body["workflowId"], {"events": body["events"]})
    failure = await replay_failure(history)
    assert failure is not None and "quiet-handover" in failure, failure


async def test_baseline_15_decides_by_the_grouping() -> None:
    """The live grouping, handing over, is the incident's live execution: it replays. Judged without the nudge, the
    recorded grouping asks no patch (48 events): the decision followed how the core grouped one activation."""
    assert await replay_failure(_history(LIVE, baseline=INPUT_BASELINE_15)) is None
    failure = await replay_failure(_history(RECORDED, baseline=INPUT_BASELINE_15))
    assert failure is not None and "quiet-handover" in failure, failure


async def test_under_baseline_16_a_covered_late_nudge_changes_no_decision() -> None:
    """The nudge is for Pod 1220 and the read reached 1221. Judged as of the round's start the run stands at 48
    events, under the threshold of 50, in either grouping: neither hands over where the round ends."""
    for order in (RECORDED, LIVE):
        failure = await replay_failure(_history(order, baseline=INPUT_BASELINE_16))
        assert failure is not None and "quiet-handover" in failure, failure


async def test_under_baseline_16_an_unread_late_nudge_changes_no_decision(monkeypatch: pytest.MonkeyPatch) -> None:
    """The nudge is for Pod 1230, past the read, and the threshold is lowered to 45 so that the round ends past it.
    Under baseline 15 the live grouping sees the nudge unread and asks no patch, where the recorded one hands over.
    Under 16 both hand over where the round ends; the nudge goes to the next run with what it has not read (its
    successor's input, which a replay does not compare)."""
    monkeypatch.setattr(signals, "QUIET_HISTORY_EVENTS", 45)
    assert await replay_failure(_history(RECORDED, baseline=INPUT_BASELINE_15, nudged_pod=1230)) is None
    assert await replay_failure(_history(LIVE, baseline=INPUT_BASELINE_15, nudged_pod=1230)) is not None
    for order in (RECORDED, LIVE):
        assert await replay_failure(_history(order, baseline=INPUT_BASELINE_16, nudged_pod=1230)) is None
