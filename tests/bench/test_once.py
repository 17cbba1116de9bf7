"""bench/once.py: the scale-out benchmark's exactly-once rules, on histories built event by event."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.contrib.pydantic import pydantic_data_converter

from bench.once import Actions, judge
from worker.history_activities import LOCAL_ACTIVITY_MARKER
from workflows.messages import (
    EnsureRequest,
    EnsureResult,
    PcsState,
    ReleaseRequest,
    ReleaseResult,
    ReplicaRef,
    ReplicaSnapshot,
    Scope,
    TerminateRequest,
)

REF = ReplicaRef(namespace="ns", pcs="s0", pcs_uid="pcs-uid", replica=0)
BREACH = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


def _payloads(value: object) -> list:  # type: ignore[type-arg]
    return list(pydantic_data_converter.payload_converter.to_payloads([value]))


def scheduled(event_id: int, activity: str, request: object) -> HistoryEvent:
    event = HistoryEvent(event_id=event_id, event_type=EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
    attrs = event.activity_task_scheduled_event_attributes
    attrs.activity_type.name = activity
    attrs.input.payloads.extend(_payloads(request))
    return event


def started(event_id: int, identity: str) -> HistoryEvent:
    event = HistoryEvent(event_id=event_id, event_type=EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED)
    event.activity_task_started_event_attributes.identity = identity
    return event


def completed(event_id: int, scheduled_id: int, result: object) -> HistoryEvent:
    event = HistoryEvent(event_id=event_id, event_type=EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED)
    event.activity_task_completed_event_attributes.scheduled_event_id = scheduled_id
    event.activity_task_completed_event_attributes.result.payloads.extend(_payloads(result))
    return event


def release(first_id: int, pods: dict[str, str], worker: str) -> list[HistoryEvent]:
    request = ReleaseRequest(ref=REF, pods=pods, gang_kind="base")
    return [scheduled(first_id, "release_gates", request), started(first_id + 1, worker),
            completed(first_id + 2, first_id, ReleaseResult(released=tuple(pods)))]


def terminate(first_id: int, worker: str, breach: datetime = BREACH) -> list[HistoryEvent]:
    request = TerminateRequest(ref=REF, scope=Scope.PCS_REPLICA, cliques={"s0-0-app": "pclq-1"}, reason="breach",
                               breach_start=breach, deadline=breach + timedelta(seconds=5))
    return [scheduled(first_id, "terminate_gang", request), started(first_id + 1, worker),
            completed(first_id + 2, first_id, {"deleted": ["s0-0-app"], "at": breach.isoformat()})]


def one_cycle(worker_a: str = "a", worker_b: str = "b") -> Actions:
    """Release, breach, terminate, recreate, release the new pod: each once, over two workers."""
    actions = Actions()
    actions.add_run("wf", release(1, {"s0-0-app-0": "pod-1"}, worker_a) + terminate(4, worker_b)
                    + release(7, {"s0-0-app-0": "pod-2"}, worker_b))
    return actions


def observed() -> dict[str, object]:
    return {"pod_incarnations": {("s0-0-app", "s0-0-app-0"): ["pod-1", "pod-2"]},
            "pclq_incarnations": {"s0-0-app": ["pclq-1", "pclq-2"]},
            "ungated_pods": ["pod-1", "pod-2"],
            "events": [{"reason": "GatesReleased", "count": 1}, {"reason": "GatesReleased"},
                       {"reason": "GangTerminated"}]}


def test_one_cycle_done_once_over_two_workers_has_no_duplicate() -> None:
    actions = one_cycle()
    verdict = judge(actions, breaches=1, **observed())  # type: ignore[arg-type]
    assert verdict.none, verdict.duplicates
    assert verdict.counts["terminations"] == 1 and verdict.counts["pods_released"] == 2
    assert actions.by_worker == {"a": 1, "b": 2}


def test_a_pod_released_by_two_activities_is_a_duplicate() -> None:
    actions = one_cycle()
    actions.add_run("wf", release(20, {"s0-0-app-0": "pod-2"}, "a"))  # a second decision for the same pod
    verdict = judge(actions, breaches=1, **observed())  # type: ignore[arg-type]
    assert verdict.duplicates == ["pod pod-2: released by 2 activities"]


def test_a_breach_terminated_twice_and_the_extra_recreate_are_caught() -> None:
    actions = one_cycle()
    actions.add_run("wf", terminate(30, "a"))
    seen = observed()
    seen["pclq_incarnations"] = {"s0-0-app": ["pclq-1", "pclq-2"]}  # only one recreate happened
    verdict = judge(actions, breaches=1, **seen)  # type: ignore[arg-type]
    assert any("terminated 2 times" in line for line in verdict.duplicates)
    assert "2 terminations for 1 breaches" in verdict.duplicates
    assert any(line.startswith("PodClique s0-0-app: 2 incarnations, expected 3") for line in verdict.duplicates)


def test_a_recreate_made_twice_is_caught_from_the_watch() -> None:
    seen = observed()
    seen["pod_incarnations"] = {("s0-0-app", "s0-0-app-0"): ["pod-1", "pod-2", "pod-3"]}
    verdict = judge(one_cycle(), breaches=1, **seen)  # type: ignore[arg-type]
    assert verdict.duplicates == ["pod s0-0-app-0: 3 incarnations, expected 2 (1 + 1 terminations)"]


def test_a_gate_gone_without_a_release_and_surplus_events_are_caught() -> None:
    seen = observed()
    seen["ungated_pods"] = ["pod-1", "pod-2", "pod-x"]
    seen["events"] = [*seen["events"], {"reason": "GatesReleased", "count": 2}, {"reason": "GangTerminated"}]  # type: ignore[misc]
    verdict = judge(one_cycle(), breaches=1, **seen)  # type: ignore[arg-type]
    assert verdict.duplicates == ["pod pod-x: lost the gate, but no activity released it",
                                  "4 GatesReleased Events for 2 releases",
                                  "2 GangTerminated Events for 1 terminations"]


def ensure_releasing(first_id: int, released: dict[str, str], worker: str) -> list[HistoryEvent]:
    """ensure_replica_releasing: materialised, and the base gang's gates removed in the same activity."""
    request = EnsureRequest(ref=REF, cached=True, release_base=True)
    result = EnsureResult(snapshot=ReplicaSnapshot(read_at=BREACH, pcs_state=PcsState.PRESENT, wanted_replicas=1),
                          released_base=released)
    return [scheduled(first_id, "ensure_replica_releasing", request), started(first_id + 1, worker),
            completed(first_id + 2, first_id, result)]


def test_a_base_gang_released_by_materialising_counts_once_and_twice_is_a_duplicate() -> None:
    actions = Actions()
    actions.add_run("wf", ensure_releasing(1, {"s0-0-app-0": "pod-1"}, "a") + terminate(4, "b")
                    + release(7, {"s0-0-app-0": "pod-2"}, "b"))
    verdict = judge(actions, breaches=1, **observed())  # type: ignore[arg-type]
    assert verdict.none, verdict.duplicates
    actions.add_run("wf", ensure_releasing(20, {"s0-0-app-0": "pod-2"}, "a"))
    verdict = judge(actions, breaches=1, **observed())  # type: ignore[arg-type]
    assert verdict.duplicates == ["pod pod-2: released by 2 activities"]


def local_marker(event_id: int, activity_type: str, result: object) -> HistoryEvent:
    """A local activity's one marker: its type and its result (no request)."""
    event = HistoryEvent(event_id=event_id, event_type=EventType.EVENT_TYPE_MARKER_RECORDED)
    marker = event.marker_recorded_event_attributes
    marker.marker_name = LOCAL_ACTIVITY_MARKER
    marker.details["data"].payloads.append(Payload(data=json.dumps({"activity_type": activity_type,
                                                                    "attempt": 1}).encode()))
    marker.details["result"].payloads.extend(_payloads(result))
    return event


def local_release(event_id: int, released: dict[str, str]) -> HistoryEvent:
    """release_gates as a local activity: its result names each released pod's UID."""
    return local_marker(event_id, "release_gates", ReleaseResult(released=tuple(released), released_uids=released))


def local_ensure_releasing(event_id: int, released: dict[str, str]) -> HistoryEvent:
    """ensure_replica_releasing as a local activity (local-ensure): the base gang's pods it released."""
    snapshot = ReplicaSnapshot(read_at=BREACH, pcs_state=PcsState.PRESENT, wanted_replicas=1)
    return local_marker(event_id, "ensure_replica_releasing", EnsureResult(snapshot=snapshot, released_base=released))


@pytest.mark.parametrize("local", [local_release, local_ensure_releasing], ids=["release_gates", "ensure_releasing"])
def test_a_release_by_a_local_activity_counts_once_and_twice_is_a_duplicate(
        local: Callable[[int, dict[str, str]], HistoryEvent]) -> None:
    actions = Actions()
    actions.add_run("wf", [local(1, {"s0-0-app-0": "pod-1"}), *terminate(2, "b"), local(5, {"s0-0-app-0": "pod-2"})])
    verdict = judge(actions, breaches=1, **observed())  # type: ignore[arg-type]
    assert verdict.none, verdict.duplicates
    assert verdict.counts["pods_released"] == 2
    actions.add_run("wf", [local(9, {"s0-0-app-0": "pod-2"})])
    verdict = judge(actions, breaches=1, **observed())  # type: ignore[arg-type]
    assert verdict.duplicates == ["pod pod-2: released by 2 activities"]
