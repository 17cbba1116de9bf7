"""Why a waiting base gang is not placed (worker.placement): the pure parts, on objects shaped as the kube-scheduler
and the PodGroup API wrote them in a local-stack run (trimmed)."""

from __future__ import annotations

from typing import Any

from worker.placement import podgroup_lines, scheduler_message


def event(pod: str, message: str, at: str, reason: str = "FailedScheduling") -> dict[str, Any]:
    return {"reason": reason, "message": message, "lastTimestamp": at, "involvedObject": {"kind": "Pod", "name": pod}}


GANG_WAIT = ("pod group is unschedulable, waiting for minCount pods from a gang to be scheduled, one or more plugins "
             "asked to wait and no plugin rejected pod")
CAUSE = "0/2 nodes are available: 2 Insufficient cpu."


def test_an_unscheduled_podgroup_gives_its_reason_and_a_scheduled_one_nothing() -> None:
    unscheduled = {"metadata": {"name": "big-0-2005d541"}, "status": {"conditions": [
        {"type": "PodGroupScheduled", "status": "False", "reason": "Unschedulable",
         "message": "pod group is unschedulable"}]}}
    scheduled = {"metadata": {"name": "big-1-aaaaaaaa"}, "status": {"conditions": [
        {"type": "PodGroupScheduled", "status": "True", "reason": "Scheduled"}]}}
    fresh = {"metadata": {"name": "big-2-bbbbbbbb"}}
    assert podgroup_lines([unscheduled, scheduled, fresh]) == [
        "PodGroup big-0-2005d541: Unschedulable (pod group is unschedulable)"]


def test_the_cause_wins_over_the_gangs_own_wait_even_when_older() -> None:
    events = [event("big-0-worker-4", CAUSE, "2026-11-23T20:32:40Z"),
              event("big-0-worker-5", GANG_WAIT, "2026-11-23T20:33:10Z"),
              event("other-0-worker-0", "0/2 nodes are available: 2 node(s) had untolerated taint.",
                    "2026-11-23T20:34:00Z"),
              event("big-0-worker-1", "Successfully assigned", "2026-11-23T20:35:00Z", reason="Scheduled")]
    assert scheduler_message(events, ["big-0-worker"]) == CAUSE
    assert scheduler_message(events[1:2], ["big-0-worker"]) == GANG_WAIT  # only the wait: say that
    assert scheduler_message(events, ["big-0-leader"]) is None
