"""The heaviest replicas of a run, round by round: where the history events past the median went.

B3 prints the history events per replica as a distribution; its tail (35 events at 1,000 x 17 where the median is
25) is a few replicas that took more rounds. For each of the heaviest, this lays its workflow tasks (when each
completed, what signals woke it, what it recorded) beside its pods' milestones (first and last released, bound and
Ready), all in seconds from the run's start, so a reader sees which change each extra round answered.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from temporalio.api.history.v1 import HistoryEvent

from bench.observer import Tracked
from grove import names
from worker.history_activities import TaskRound, task_rounds
from workflows.contract import parse_replica_workflow_id

# A pod's milestones, each the first recorded state that shows it (bench/observer.py's pod state).
MILESTONES = {"released": lambda s: not s["gated"], "bound": lambda s: s["scheduled"], "ready": lambda s: s["ready"]}


def heaviest(lengths: Mapping[str, int], count: int) -> list[str]:
    """The `count` workflows with the longest histories, longest first (ties by id, so a rerun picks the same)."""
    return sorted(lengths, key=lambda workflow_id: (-lengths[workflow_id], workflow_id))[:count]


def pod_marks(pods: Iterable[Tracked], pcs: str, replica: int, t0: float) -> dict[str, list[float]]:
    """Per milestone, the first and last of the replica's pods to reach it, in seconds from `t0` (absent: none did)."""
    mine = [p for p in pods if p.labels.get(names.LABEL_PART_OF) == pcs
            and p.labels.get(names.LABEL_PCS_REPLICA_INDEX) == str(replica)]
    marks: dict[str, list[float]] = {}
    for milestone, reached in MILESTONES.items():
        times = [at for p in mine if (at := p.first(reached)) is not None]
        if times:
            marks[milestone] = [round(min(times) - t0, 2), round(max(times) - t0, 2)]
    return marks


def timeline(workflow_id: str, events: int, rounds: list[TaskRound], pods: Iterable[Tracked],
             t0: float) -> dict[str, Any]:
    """One heavy replica: its history's length, its pods' milestones and its rounds, in seconds from `t0`."""
    key = parse_replica_workflow_id(workflow_id)
    return {
        "replica": f"{key.pcs}/{key.replica}" if key else workflow_id,
        "history_events": events,
        "pods_s": pod_marks(pods, key.pcs, key.replica, t0) if key else {},
        "rounds": [{"at_s": round(r.completed_at.timestamp() - t0, 2), "woken_by": list(r.signals),
                    "recorded": list(r.commands)} for r in rounds],
    }


def heaviest_timelines(histories: Mapping[str, list[HistoryEvent]], lengths: Mapping[str, int], pods: list[Tracked],
                       t0: float, count: int = 3) -> list[dict[str, Any]]:
    """`timeline` of each of the `count` heaviest replicas whose history was read (their current run: B3's replicas
    do not hand over)."""
    return [timeline(workflow_id, lengths[workflow_id], task_rounds(histories[workflow_id]), pods, t0)
            for workflow_id in heaviest({w: n for w, n in lengths.items() if w in histories}, count)]
