"""bench/heaviest.py: the heaviest replicas of a B3 run, their rounds beside their pods' milestones (pure)."""

from __future__ import annotations

from datetime import UTC, datetime

from bench.heaviest import heaviest, pod_marks, timeline
from bench.observer import Tracked
from grove import names
from worker.history_activities import TaskRound
from workflows.contract import replica_workflow_id


def _pod(pcs: str, replica: int, name: str, history: list[tuple[float, dict[str, bool]]]) -> Tracked:
    labels = {names.LABEL_PART_OF: pcs, names.LABEL_PCS_REPLICA_INDEX: str(replica)}
    return Tracked("Pod", "ns", name, f"uid-{name}", labels, history)


GATED = {"gated": True, "scheduled": False, "ready": False}
RELEASED = {"gated": False, "scheduled": False, "ready": False}
BOUND = {"gated": False, "scheduled": True, "ready": False}
READY = {"gated": False, "scheduled": True, "ready": True}


def test_the_longest_histories_come_first_and_ties_go_by_id() -> None:
    lengths = {"b": 25, "a": 35, "c": 35, "d": 20}
    assert heaviest(lengths, 3) == ["a", "c", "b"]
    assert heaviest(lengths, 10) == ["a", "c", "b", "d"] and heaviest({}, 3) == []


def test_a_replicas_milestones_are_its_first_and_last_pod_to_reach_each_and_other_replicas_do_not_count() -> None:
    pods = [
        _pod("p", 1, "a", [(100.0, GATED), (110.0, RELEASED), (130.0, BOUND), (150.0, READY)]),
        _pod("p", 1, "b", [(101.0, GATED), (112.0, RELEASED), (125.0, BOUND), (170.5, READY)]),
        _pod("p", 1, "c", [(101.0, GATED), (140.0, RELEASED)]),  # released, never bound
        _pod("p", 2, "d", [(100.0, GATED), (105.0, READY)]),  # another replica
        _pod("q", 1, "e", [(100.0, GATED), (101.0, READY)]),  # another PCS, same index
    ]
    assert pod_marks(pods, "p", 1, 100.0) == {"released": [10.0, 40.0], "bound": [25.0, 30.0],
                                              "ready": [50.0, 70.5]}
    assert pod_marks(pods, "p", 3, 100.0) == {}, "a replica without pods has no milestones"


def test_a_timeline_names_the_replica_and_times_its_rounds_from_the_runs_start() -> None:
    t0 = datetime(2026, 12, 7, 12, tzinfo=UTC).timestamp()
    rounds = [TaskRound(datetime(2026, 12, 7, 12, 0, 2, tzinfo=UTC), (), ("local:ensure_replica_releasing",)),
              TaskRound(datetime(2026, 12, 7, 12, 0, 40, 500000, tzinfo=UTC), ("nudge",),
                        ("local:observe_replica_cached",))]
    pods = [_pod("p", 4, "a", [(t0 + 1, GATED), (t0 + 2, RELEASED), (t0 + 30, BOUND), (t0 + 39, READY)])]
    found = timeline(replica_workflow_id("ns", "p", "uid", 4), 30, rounds, pods, t0)
    assert found == {
        "replica": "p/4", "history_events": 30,
        "pods_s": {"released": [2.0, 2.0], "bound": [30.0, 30.0], "ready": [39.0, 39.0]},
        "rounds": [{"at_s": 2.0, "woken_by": [], "recorded": ["local:ensure_replica_releasing"]},
                   {"at_s": 40.5, "woken_by": ["nudge"], "recorded": ["local:observe_replica_cached"]}],
    }
