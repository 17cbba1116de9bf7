"""The fault runner's checks can fail: each invariant of faults/invariants.py is shown catching the violation it is
for (early, twice, missing, scaled release before the base gang, leaked/missing objects, a touched foreign
object) and passing the correct case; round plans are repeatable from a seed and cover every fault kind."""

from __future__ import annotations

import dataclasses
import random
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.contrib.pydantic import pydantic_data_converter

from faults import invariants, schedule
from faults.history import RunDigest, TerminateCall, WorkflowDigest, digest_events
from faults.invariants import LiveObjects
from faults.recorder import PclqRecord, PodEvent, PodState
from faults.workload import Workload
from grove import names
from grove.termination import Scope
from workflows.messages import (
    CliqueState,
    EnsureResult,
    PcsState,
    ReplicaRef,
    ReplicaSnapshot,
    TerminateRequest,
)

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
KEY = ("avail", 0)
REF = ReplicaRef(namespace="ns", pcs="avail", pcs_uid="pcs-uid", replica=0)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def call(event_id: int, scheduled: float, *, breach: float = 0.0, delay: float = 3.0, scope: Scope = Scope.PCS_REPLICA,
         cliques: dict[str, str] | None = None, completed: float | None = None, group: str | None = None,
         group_replica: int | None = None) -> TerminateCall:
    request = TerminateRequest(
        ref=REF, scope=scope, scaling_group=group, scaling_group_replica=group_replica,
        cliques=cliques or {"avail-0-frontend": f"uid-{event_id}"}, reason="test", breach_start=at(breach),
        delay=timedelta(seconds=delay), deadline=at(breach + delay),
    )
    done = at(completed if completed is not None else scheduled + 0.2)
    return TerminateCall("wf", "run", event_id, at(scheduled), request, done)


def digest(*calls: TerminateCall, available: set[str] | None = None) -> dict[tuple[str, int], WorkflowDigest]:
    run = RunDigest("run", None, False, terminations=list(calls), available_uids=available or set())
    return {KEY: WorkflowDigest("wf", [run])}


def pclq(uid: str, name: str = "avail-0-frontend", deleted: datetime | None = None,
         seen: float | None = None) -> PclqRecord:
    labels = {names.LABEL_MANAGED_BY: names.MANAGED_BY, names.LABEL_PART_OF: "avail",
              names.LABEL_PCS_REPLICA_INDEX: "0"}
    return PclqRecord(uid=uid, name=name, labels=labels, owner_kind="PodCliqueSet", owner_uid="pcs-uid",
                      created=T0, first_seen=T0.timestamp(), deletion_timestamp=deleted,
                      deleting_seen=seen)


# --- never early -------------------------------------------------------------------------------------------------
def test_a_termination_scheduled_at_or_after_its_deadline_passes() -> None:
    found = invariants.never_early(digest(call(1, scheduled=3.0)), {"uid-1": pclq("uid-1", deleted=at(3),
                                                                                       seen=at(3.1).timestamp())})
    assert found.violations == []
    assert found.counts["terminations_checked"] == 1 and found.counts["deletions_checked"] == 1


def test_a_termination_scheduled_before_its_deadline_is_a_violation() -> None:
    found = invariants.never_early(digest(call(1, scheduled=2.9)), {})
    assert [v.invariant for v in found.violations] == [invariants.NEVER_EARLY]


def test_a_podclique_marked_for_deletion_a_second_before_the_deadline_is_a_violation() -> None:
    # deletionTimestamp has whole seconds: 3.0 for a deadline of 3.9 is fine, 2.0 is not
    ok = invariants.never_early(digest(call(1, scheduled=4, delay=3.9)), {"uid-1": pclq("uid-1", deleted=at(3))})
    early = invariants.never_early(digest(call(1, scheduled=4, delay=3.9)), {"uid-1": pclq("uid-1", deleted=at(2))})
    assert ok.violations == [] and len(early.violations) == 1


def test_a_deadline_that_is_not_breach_start_plus_delay_is_a_violation() -> None:
    bad = call(1, scheduled=5.0)
    bad = TerminateCall(bad.workflow_id, bad.run_id, bad.event_id, bad.scheduled_at,
                        bad.request.model_copy(update={"deadline": at(2)}), bad.completed_at)
    assert len(invariants.never_early(digest(bad), {}).violations) == 1


# --- exactly once ------------------------------------------------------------------------------------------------
def exactly(*calls: TerminateCall, events: list[dict] | None = None, pclqs: dict[str, PclqRecord] | None = None,
            paused: bool = False, total: int | None = None) -> list[str]:
    found = invariants.exactly_once(digest(*calls), {KEY: len(calls) if total is None else total}, events or [],
                                    {"avail": "pcs-uid"}, pclqs or {}, {KEY} if paused else set(), settled=True)
    return [v.key.split("/")[0] for v in found.violations]


def test_one_termination_per_breach_passes_and_a_second_for_the_same_breach_fails() -> None:
    first, again = call(1, 3.0), call(2, 4.0)
    assert exactly(first) == []
    assert "twice" in exactly(first, again)


def test_a_later_termination_of_a_recreated_target_must_act_on_a_breach_that_began_after_it() -> None:
    first = call(1, 3.0, completed=3.5)
    later_breach = call(2, 10.0, breach=5.0)
    stale_breach = call(3, 10.0, breach=1.0)  # began before the first termination completed: acted on twice
    assert exactly(first, later_breach) == []
    assert exactly(first, stale_breach) == ["restart"]


def test_different_pcsg_replicas_may_share_a_breach_start() -> None:
    a = call(1, 3.0, scope=Scope.PCSG_REPLICA, group="avail-0-sg", group_replica=0)
    b = call(2, 3.0, scope=Scope.PCSG_REPLICA, group="avail-0-sg", group_replica=1)
    assert exactly(a, b) == []


def test_more_gang_terminated_events_than_terminations_fail() -> None:
    event = {"reason": "GangTerminated", "involvedObject": {"uid": "pcs-uid"}, "message": "replica 0: x"}
    assert exactly(call(1, 3.0), events=[event]) == []
    assert exactly(call(1, 3.0), events=[event, dict(event)]) == ["events"]


def test_a_podclique_deleted_without_a_termination_naming_it_fails() -> None:
    named = pclq("uid-1", deleted=at(3), seen=at(3).timestamp())
    stray = pclq("uid-x", deleted=at(3), seen=at(3).timestamp())
    assert exactly(call(1, 3.0), pclqs={"uid-1": named}) == []
    assert exactly(call(1, 3.0), pclqs={"uid-x": stray}) == ["unexplained"]


def test_a_termination_found_healed_counts_as_none_and_excuses_no_deletion() -> None:
    """terminate_gang found the breach healed and deleted nothing: the workflow counts no termination; the breach
    seen again later is terminated (same start: the checker does not count the healed call twice); a PodClique it
    named but that was deleted anyway is unexplained."""
    healed = dataclasses.replace(call(1, 3.0), healed="the breach has healed")
    again = call(2, 6.0)
    assert exactly(healed, total=0) == []
    assert exactly(healed, again, total=1) == []
    assert exactly(healed, total=1) == ["total"]
    deleted = pclq("uid-1", deleted=at(3), seen=at(3).timestamp())
    assert exactly(healed, pclqs={"uid-1": deleted}, total=0) == ["unexplained"]


def test_a_podclique_outside_the_plan_is_an_hpa_scale_in_not_an_unexplained_deletion() -> None:
    extra = pclq("uid-e", name="avail-0-sg-4-worker", deleted=at(3), seen=at(3).timestamp())
    stray = pclq("uid-x", deleted=at(3), seen=at(3).timestamp())
    found = invariants.exactly_once(digest(call(1, 3.0)), {KEY: 1}, [], {"avail": "pcs-uid"},
                                    {"uid-e": extra, "uid-x": stray}, set(), settled=True,
                                    planned={"avail-0-frontend"})
    assert [v.key.split("/")[0] for v in found.violations] == ["unexplained"]  # only the planned one
    assert found.counts["pclq_scaled_in_seen"] == 1


def test_a_paused_replica_is_never_terminated_and_the_count_must_match_the_history() -> None:
    assert exactly(call(1, 3.0), paused=True) == ["paused"]
    assert exactly(call(1, 3.0), total=2) == ["total"]


# --- scaled gates ------------------------------------------------------------------------------------------------
PCSG_PLANS = {k: v for k, v in Workload("ns", 1).plans.items() if k == ("pcsg", 0)}
BASE_GROUPS = PCSG_PLANS[("pcsg", 0)].base_gang.pod_groups


def pod(name: str, *, gated: bool, scheduled: bool, scaled: bool = False) -> PodState:
    pclq_name = name.rsplit("-", 1)[0]
    labels = {names.LABEL_MANAGED_BY: names.MANAGED_BY, names.LABEL_PART_OF: "pcsg",
              names.LABEL_PCS_REPLICA_INDEX: "0", names.LABEL_PODCLIQUE: pclq_name}
    if scaled:
        labels[names.LABEL_BASE_PODGANG] = "pcsg-0"
    return PodState(name, f"uid-{name}", labels, "PodClique", f"uid-{pclq_name}", "n" if scheduled else "", gated,
                    scheduled, scheduled, False)


def base_pods(scheduled: bool) -> list[PodState]:
    return [pod(f"{g.name}-{i}", gated=False, scheduled=scheduled) for g in BASE_GROUPS for i in range(g.min_replicas)]


def stream(states: list[PodState]) -> list[PodEvent]:
    seen: set[str] = set()
    events = []
    for seq, state in enumerate(states):
        events.append(PodEvent(seq, float(seq), "MODIFIED" if state.uid in seen else "ADDED", state))
        seen.add(state.uid)
    return events


def test_a_scaled_pod_released_after_the_base_gang_was_scheduled_passes() -> None:
    scaled = "pcsg-0-prefill-2-worker-0"
    events = stream([pod(scaled, gated=True, scheduled=False, scaled=True), *base_pods(scheduled=True),
                     pod(scaled, gated=False, scheduled=False, scaled=True)])
    found = invariants.scaled_gates(events, PCSG_PLANS)
    assert found.violations == [] and found.counts["scaled_releases_checked"] == 1


def test_a_scaled_pod_released_before_the_base_gang_was_scheduled_fails() -> None:
    scaled = "pcsg-0-prefill-2-worker-0"
    events = stream([pod(scaled, gated=True, scheduled=False, scaled=True), *base_pods(scheduled=False),
                     pod(scaled, gated=False, scheduled=False, scaled=True), *base_pods(scheduled=True)])
    assert [v.invariant for v in invariants.scaled_gates(events, PCSG_PLANS).violations] == [invariants.SCALED_GATES]


def test_a_scaled_pod_created_without_the_gate_fails() -> None:
    events = stream([*base_pods(scheduled=True), pod("pcsg-0-prefill-2-worker-0", gated=False, scheduled=False,
                                                     scaled=True)])
    assert [v.key.split("/")[0] for v in invariants.scaled_gates(events, PCSG_PLANS).violations] == [
        "ungated-at-birth"]


# --- objects -----------------------------------------------------------------------------------------------------
def obj(kind: str, name: str, uid: str, owner: str | None, **labels: str) -> dict:
    meta: dict = {"name": name, "uid": uid, "labels": {names.LABEL_MANAGED_BY: names.MANAGED_BY,
                                                       names.LABEL_PART_OF: "avail",
                                                       names.LABEL_PCS_REPLICA_INDEX: "0", **labels}}
    if owner:
        meta["ownerReferences"] = [{"kind": kind, "uid": owner, "controller": True}]
    return {"metadata": meta}


def avail_live(*, drop_pod: str | None = None, extra: dict | None = None) -> LiveObjects:
    plan = Workload("ns", 1).plans[KEY]
    pclqs = [obj("PodCliqueSet", p.name, f"uid-{p.name}", "pcs-uid") for p in plan.pod_cliques]
    pods = [obj("PodClique", pod_name, f"uid-{pod_name}", f"uid-{p.name}") for p in plan.pod_cliques
            for pod_name in p.pod_names if pod_name != drop_pod]
    return LiveObjects(pclqs=pclqs, pcsgs=[], gangs=[obj("PodCliqueSet", g.name, g.name, "pcs-uid")
                                                     for g in plan.pod_gangs],
                       pods=pods + ([extra] if extra else []),
                       services=[obj("PodCliqueSet", plan.service.name, "svc", "pcs-uid")], nodes=set())


def test_objects_match_the_plan_and_a_lookalike_with_our_labels_is_not_counted() -> None:
    plans = {KEY: Workload("ns", 1).plans[KEY]}
    lookalike = obj("ReplicaSet", "avail-0-frontend-9", "x", "somebody")
    assert invariants.objects_match(avail_live(extra=lookalike), plans, {"avail": "pcs-uid"}, 1).violations == []


def test_a_missing_pod_and_a_leaked_pod_are_violations() -> None:
    plans = {KEY: Workload("ns", 1).plans[KEY]}
    leaked = obj("PodClique", "avail-0-frontend-7", "uid-7", "uid-avail-0-frontend")
    found = invariants.objects_match(avail_live(drop_pod="avail-0-api-1", extra=leaked), plans,
                                     {"avail": "pcs-uid"}, 1)
    assert sorted(v.key.split("/")[0] for v in found.violations) == ["leaked", "missing"]


# --- none missing ------------------------------------------------------------------------------------------------
def test_a_long_breach_of_an_incarnation_the_workflow_saw_available_is_a_missing_termination() -> None:
    breach = invariants.Breach(KEY, "avail-0-frontend", "uid-f", 1, 2, since=100.0)
    delays = {(KEY, "avail-0-frontend"): timedelta(seconds=3)}
    seen = digest(available={"uid-f"})
    assert len(invariants.none_missing([breach], seen, delays, now=200.0, grace=30).violations) == 1
    assert invariants.none_missing([breach], seen, delays, now=110.0, grace=30).violations == []  # within its time
    assert invariants.none_missing([breach], digest(), delays, now=200.0, grace=30).violations == []  # never seen


# --- foreign -----------------------------------------------------------------------------------------------------
def foreign(rv: str, *, labels: dict | None = None, managers: list[str] = ("grove-temporal-faults",)) -> dict:
    return {"metadata": {"uid": "f", "resourceVersion": rv, "labels": labels or {"app": "x"},
                         "managedFields": [{"manager": m} for m in managers]}, "spec": {"nodeName": "n"}}


def test_a_foreign_object_may_have_its_status_written_by_the_control_plane_but_nothing_else() -> None:
    before = {"Pod/x": foreign("1")}
    assert invariants.foreign_untouched(before, {"Pod/x": foreign("1")}).violations == []
    status_only = foreign("2", managers=["grove-temporal-faults", "kube-controller-manager"])
    assert invariants.foreign_untouched(before, {"Pod/x": status_only}).violations == []
    relabelled = foreign("2", labels={"app": "y"})
    ours = foreign("2", managers=["grove-temporal-faults", "grove-temporal"])
    assert len(invariants.foreign_untouched(before, {"Pod/x": relabelled}).violations) == 1
    assert len(invariants.foreign_untouched(before, {"Pod/x": ours}).violations) == 1
    assert len(invariants.foreign_untouched(before, {"Pod/x": None}).violations) == 1


# --- history digest ----------------------------------------------------------------------------------------------
def snapshot(uid: str, ready: int, read_at: datetime = T0) -> ReplicaSnapshot:
    plan = Workload("ns", 1).plans[KEY]
    return ReplicaSnapshot(read_at=read_at, pcs_state=PcsState.PRESENT, topology=plan.topology(),
                           cliques={"avail-0-frontend": CliqueState(uid=uid, pods=2, ready=ready)})


def scheduled(event_id: int, activity: str) -> HistoryEvent:
    event = HistoryEvent(event_id=event_id, event_type=EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
    event.activity_task_scheduled_event_attributes.activity_type.name = activity
    return event


def completed(event_id: int, scheduled_id: int, result: object) -> HistoryEvent:
    event = HistoryEvent(event_id=event_id, event_type=EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED)
    attrs = event.activity_task_completed_event_attributes
    attrs.scheduled_event_id = scheduled_id
    attrs.result.payloads.extend(pydantic_data_converter.payload_converter.to_payloads([result]))
    return event


def test_the_workflow_saw_available_only_what_it_evaluated() -> None:
    # observe (available, uid-a) → mirror: evaluated. observe (available, uid-b) → ensure (not available, uid-c):
    # the round decided on ensure's snapshot, so uid-b was never evaluated.
    events = [
        scheduled(1, "observe_replica"), completed(2, 1, snapshot("uid-a", 2)), scheduled(3, "mirror_status"),
        scheduled(4, "observe_replica"), completed(5, 4, snapshot("uid-b", 2)), scheduled(6, "ensure_replica"),
        completed(7, 6, EnsureResult(snapshot=snapshot("uid-c", 1))),
    ]
    run = digest_events("wf", "run", events)
    assert run.available_uids == {"uid-a"} and run.observations == 2


def local(event_id: int, activity: str, result: object) -> HistoryEvent:
    """A local activity's marker, as the SDK's core writes it (seen in a real history)."""
    event = HistoryEvent(event_id=event_id, event_type=EventType.EVENT_TYPE_MARKER_RECORDED)
    marker = event.marker_recorded_event_attributes
    marker.marker_name = "core_local_activity"
    data = {"seq": event_id, "attempt": 1, "activity_id": str(event_id), "activity_type": activity,
            "complete_time": {"seconds": 1795678844, "nanos": 0}, "backoff": None,
            "original_schedule_time": {"seconds": 1795678845, "nanos": 43679441}, "activation_index": 1}
    marker.details["data"].payloads.extend(pydantic_data_converter.payload_converter.to_payloads([data]))
    marker.details["result"].payloads.extend(pydantic_data_converter.payload_converter.to_payloads([result]))
    return event


def terminate(event_id: int) -> HistoryEvent:
    event = scheduled(event_id, "terminate_gang")
    event.activity_task_scheduled_event_attributes.input.payloads.extend(
        pydantic_data_converter.payload_converter.to_payloads([call(event_id, 1.0).request]))
    return event


def test_local_activity_markers_count_as_observations_and_a_termination_on_a_cached_one_is_caught() -> None:
    cached = snapshot("uid-a", 2).model_copy(update={"from_cache": True})
    events = [local(1, "observe_replica_cached", cached), local(2, "mirror_status", ["avail-0-frontend"]),
              local(3, "observe_replica_cached", cached), terminate(4)]
    run = digest_events("wf", "run", events)
    assert run.available_uids == {"uid-a"} and run.observations == 2
    assert run.decided_on_cache == [4], "terminate_gang scheduled right after a read from the watch cache"
    fresh = [local(1, "observe_replica_cached", cached), scheduled(2, "observe_replica"),
             completed(3, 2, snapshot("uid-a", 2)), terminate(4)]
    assert digest_events("wf", "run", fresh).decided_on_cache == []


def test_a_breach_stamped_before_any_read_that_showed_it_is_a_violation() -> None:
    """A round that kept an old decision time stamped a breach it had just read 1-3 s before the pod broke (its
    deadline ran short; fixed by READ_TIME_FLOOR_PATCH). The deadline arithmetic alone cannot see that: the stamp must
    also be at or after a read that showed a terminated incarnation short of minAvailable."""
    topology = Workload("ns", 1).plans[KEY].topology()

    def read(frontend_ready: int | None, seconds: float) -> ReplicaSnapshot:
        """Every PodClique at its minAvailable, but the frontend (uid-1) at `frontend_ready` (None: missing)."""
        cliques = {u.name: CliqueState(uid=f"uid-{u.name}", pods=u.min_available, ready=u.min_available)
                   for u in topology.cliques if u.name != "avail-0-frontend"}
        if frontend_ready is not None:
            cliques["avail-0-frontend"] = CliqueState(uid="uid-1", pods=2, ready=frontend_ready)
        return ReplicaSnapshot(read_at=at(seconds), pcs_state=PcsState.PRESENT, topology=topology, cliques=cliques)

    minimum = next(u.min_available for u in topology.cliques if u.name == "avail-0-frontend")
    events = [local(1, "observe_replica_cached", read(minimum, 0)), local(2, "mirror_status", ["avail-0-frontend"]),
              local(3, "observe_replica_cached", read(minimum - 1, 5)), local(4, "mirror_status", ["avail-0-frontend"]),
              local(5, "observe_replica_cached", read(None, 9)), local(6, "mirror_status", ["avail-0-frontend"])]
    run = digest_events("wf", "run", events)
    assert [(r.read_at, r.short, r.missing) for r in run.reads] == [
        (at(0), frozenset(), False), (at(5), frozenset({"uid-1"}), False), (at(9), frozenset(), True)]

    def checked(breach: float) -> list[str]:
        chain = {KEY: WorkflowDigest("wf", [RunDigest("run", None, False, terminations=[
            call(1, scheduled=breach + 3, breach=breach)], reads=run.reads)])}
        return [v.key for v in invariants.never_early(chain, {}).violations]

    assert checked(5.0) == [] and checked(6.0) == [], "stamped at or after the read that showed it"
    assert checked(1.0) == ["stamped/wf@run#1"], "stamped before the read that showed it"
    run.reads[1:2] = []  # without the short read, the missing PodClique at 9 s is the first that shows a breach
    assert checked(6.0) == ["stamped/wf@run#1"] and checked(9.0) == []


# --- schedule ----------------------------------------------------------------------------------------------------
def planner(seed: int) -> schedule.Planner:
    return schedule.Planner(random.Random(seed), {"avail": ["avail-0-api-0", "avail-0-frontend-0"]},
                            ["slow-0-api-0", "slow-0-frontend-0"])


def test_rounds_are_repeatable_from_the_seed_and_every_kind_comes_in_the_first_four() -> None:
    first = [planner(5).plan_round() for _ in range(1)]
    again = planner(5)
    assert [again.plan_round() for _ in range(1)] == first
    kinds = set()
    plans = planner(6)
    for _ in range(4):
        kinds |= {s.action for s in plans.plan_round() if s.action in schedule.FAULT_KINDS}
    assert kinds == set(schedule.FAULT_KINDS)


def _seed7(settings: schedule.Settings) -> list[list[str]]:
    plans = schedule.Planner(random.Random(7), {"avail": ["avail-0-api-0", "avail-0-frontend-0"]},
                             ["slow-0-api-0", "slow-0-frontend-0"], settings=settings,
                             scalable=(("PodClique", "avail-0-api", 2),), changeable=("avail", "slow"))
    return [[s.action for s in plans.plan_round() if s.action in schedule.ALL_FAULT_KINDS] for _ in range(6)]


def test_opt_in_fault_kinds_leave_the_default_rounds_of_a_seed_as_they_were() -> None:
    # printed by the planner before etcd-restart existed (same seed, settings and targets)
    before = [["node-loss", "temporal-restart"], ["apiserver-outage"], ["node-loss", "worker-kill"],
              ["temporal-restart", "worker-kill"], ["node-loss", "temporal-restart"], ["apiserver-outage"]]
    assert _seed7(schedule.Settings(template_change_probability=0.3)) == before


def test_etcd_restart_joins_the_cycle_when_asked_for() -> None:
    settings = schedule.Settings(fault_kinds=schedule.ALL_FAULT_KINDS, etcd_down_seconds=(2.0, 3.0),
                                 extra_fault_probability=0.0)
    plans = schedule.Planner(random.Random(1), {"avail": ["avail-0-api-0"]}, ["slow-0-api-0"], settings=settings)
    rounds = [plans.plan_round() for _ in range(len(schedule.ALL_FAULT_KINDS))]
    primaries = [next(s for s in r if s.action in schedule.ALL_FAULT_KINDS) for r in rounds]
    assert primaries[0].action == schedule.NODE_LOSS
    assert {p.action for p in primaries} == set(schedule.ALL_FAULT_KINDS)
    etcd = next(p for p in primaries if p.action == schedule.ETCD_RESTART)
    assert 2.0 <= etcd.seconds <= 3.0


def test_with_two_workers_kills_hit_either_and_one_worker_plays_the_rounds_as_before() -> None:
    def kills(settings: schedule.Settings) -> list[tuple[float, int]]:
        plans = schedule.Planner(random.Random(11), {"avail": ["avail-0-api-0"]}, ["slow-0-api-0"],
                                 settings=settings)
        return [(s.at, s.worker) for _ in range(40) for s in plans.plan_round() if s.action == schedule.WORKER_KILL]

    one = kills(schedule.Settings())
    assert {worker for _, worker in one} == {0}
    two = kills(schedule.Settings(workers=2))
    assert {worker for _, worker in two} == {0, 1}
    assert two[0][0] == one[0][0], "the first kill comes at the same moment: the pick is drawn after it"
    step = schedule.Step(3.0, schedule.WORKER_KILL, seconds=1.0, worker=1)
    assert "worker 2" in step.describe()


def test_partitions_join_the_cycle_when_asked_for_and_hit_either_worker() -> None:
    settings = schedule.Settings(fault_kinds=schedule.ALL_FAULT_KINDS, workers=2, partition_seconds=(5.0, 6.0),
                                 extra_fault_probability=0.0)
    plans = schedule.Planner(random.Random(5), {"avail": ["avail-0-api-0"]}, ["slow-0-api-0"], settings=settings)
    steps = [s for _ in range(4 * len(schedule.ALL_FAULT_KINDS)) for s in plans.plan_round()
             if s.action in schedule.PARTITIONS]
    assert {s.action for s in steps} == set(schedule.PARTITIONS)
    assert {s.worker for s in steps} == {0, 1}
    assert all(5.0 <= s.seconds <= 6.0 for s in steps)


def test_hpa_style_scale_steps_go_up_and_come_back_to_the_template_count_within_the_round() -> None:
    targets = (("PodCliqueScalingGroup", "pcsg-0-prefill", 3), ("PodClique", "avail-0-api", 2))
    plans = schedule.Planner(random.Random(3), {"avail": ["avail-0-api-0"]}, ["slow-0-api-0"], scalable=targets)
    seen = 0
    for _ in range(20):
        steps = [s for s in plans.plan_round() if s.action == schedule.SCALE]
        if not steps:
            continue
        seen += 1
        up, back = steps
        template = {name: count for _, name, count in targets}[up.target[1]]  # type: ignore[index]
        assert up.target == back.target and up.at <= back.at <= plans.settings.round_seconds
        assert template < up.replicas <= template + 2 and back.replicas == template
    assert 5 <= seen <= 15, seen


async def test_replayable_flags_a_history_that_does_not_replay_keeps_it_and_passes_one_that_does(
        tmp_path: Path) -> None:
    from tests import histories

    fixtures = Path(__file__).resolve().parents[1] / "fixtures"
    good = histories.load(sorted((fixtures / "histories").glob("*.json"))[0])
    bad = histories.load(fixtures / "incidents" / "nondeterminism-round52.json")
    found = await invariants.replayable(histories.replayer(), {"good-run": good, "bad-run": bad}, keep_in=tmp_path)
    assert found.counts["histories_replayed"] == 2
    assert [v.key for v in found.violations] == ["replay/bad-run"]
    assert found.violations[0].invariant == invariants.REPLAYABLE
    assert "Nondeterminism" in found.violations[0].detail and "id: 292" in found.violations[0].detail
    # The failing history is kept, named in the detail, and loads as the history it was: an incident fixture.
    kept = tmp_path / "unreplayable-bad-run.json"
    assert [p.name for p in tmp_path.iterdir()] == [kept.name] and str(kept) in found.violations[0].detail
    again = histories.load(kept)
    assert again.workflow_id == bad.workflow_id and list(again.events) == list(bad.events)


def test_an_unknown_fault_kind_is_refused_by_name_before_anything_starts() -> None:
    from typer.testing import CliRunner

    from worker.cli import app

    result = CliRunner(env={"COLUMNS": "200"}).invoke(app, ["faults", "--fault-kinds", "worker-kill,etcd-outage"])
    assert result.exit_code == 2
    assert "--fault-kinds" in result.stderr and "etcd-outage" in result.stderr and "etcd-restart" in result.stderr


def test_the_skewed_worker_launcher_runs_the_cli_with_its_wall_clock_off(monkeypatch: pytest.MonkeyPatch) -> None:
    from faults import skewed_worker
    from worker import cli

    seen: dict[str, object] = {}

    def fake_cli() -> None:
        seen.update(now=datetime.now(UTC), wall=time.time(), monotonic=time.monotonic(), argv=list(sys.argv))

    monkeypatch.setattr(cli, "main", fake_cli)
    monkeypatch.setattr(sys, "argv", ["skewed_worker", "-3600", "worker", "--namespace", "n"])
    before = (datetime.now(UTC), time.monotonic())
    skewed_worker.main()
    behind = before[0] - seen["now"]  # type: ignore[operator]
    assert 3599 < behind.total_seconds() < 3601
    assert abs(before[0].timestamp() - 3600 - seen["wall"]) < 1  # type: ignore[operator]
    assert 0 <= seen["monotonic"] - before[1] < 1  # type: ignore[operator]
    assert seen["argv"] == ["grove-temporal", "worker", "--namespace", "n"]
    assert abs((datetime.now(UTC) - before[0]).total_seconds()) < 1, "the clock is back once the CLI returns"


def test_the_planner_counts_a_pod_broken_as_the_round_will_leave_it_in_time_order() -> None:
    """A heal drawn after a break of the same pod may be timed before it (seed 23 of a fault run, round 10); the
    pod ends the round broken and the planner must know, or the quiet period never heals it."""
    crossed = 0
    for seed in range(40):
        plans = planner(seed)
        left_broken: set[str] = set()
        for _ in range(6):
            steps = plans.plan_round()
            last: dict[str, str] = {}
            for step in steps:  # in time order, as the runner carries them out
                if step.action in (schedule.BREAK, schedule.HEAL) and step.pod:
                    last[step.pod] = step.action
            heal_then_break = {s.pod for s in steps if s.action == schedule.HEAL} & {
                s.pod for s in steps if s.action == schedule.BREAK and any(
                    h.pod == s.pod and h.action == schedule.HEAL and h.at < s.at for h in steps)}
            crossed += sum(1 for pod in heal_then_break if last[pod] == schedule.BREAK)
            left_broken = {p for p in left_broken if p not in last} | {p for p, a in last.items() if a == schedule.BREAK}
            assert plans.broken == left_broken, (seed, steps)
    assert crossed > 0, "no round of these seeds times a heal before a break of the same pod: the test proves nothing"
