"""The fault runner's rolling-update checks (faults/rollout_invariants.py) can fail: more units down because of
the rollout than maxUnavailable, two replicas at once, a pod recreated twice for one template, a pod recreated to
the hash it had, an unfinished rollout; and they pass the correct cases. The exactly-once check tells a rollout's
PodClique deletions (whole PCSG replicas) from terminations; template-change steps are drawn from the seed."""

from __future__ import annotations

import dataclasses
import random
from datetime import UTC, datetime
from typing import Any

from faults import invariants, rollout_invariants, schedule
from faults.history import RecreateCall, RunDigest, WorkflowDigest
from faults.recorder import PclqRecord, PodEvent, PodState
from grove import names
from workflows.messages import RecreateRequest, ReplicaRef

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def ref(replica: int) -> ReplicaRef:
    return ReplicaRef(namespace="ns", pcs="avail", pcs_uid="pcs-uid", replica=replica)


def pod(name: str, uid: str, *, ready: bool = True, deleting: bool = False, hash_: str = "old", replica: int = 0,
        pclq: str | None = None, pcsg: str | None = None, pcsg_replica: int | None = None) -> PodState:
    clique = pclq or name.rsplit("-", 1)[0]
    labels = {names.LABEL_MANAGED_BY: names.MANAGED_BY, names.LABEL_PART_OF: "avail",
              names.LABEL_PCS_REPLICA_INDEX: str(replica), names.LABEL_PODCLIQUE: clique,
              names.LABEL_POD_TEMPLATE_HASH: hash_}
    if pcsg:
        labels[names.LABEL_PCSG] = pcsg
        labels[names.LABEL_PCSG_REPLICA_INDEX] = str(pcsg_replica)
    return PodState(name, uid, labels, names.KIND_PODCLIQUE, f"pclq-{clique}-{replica}", "n", False, True, ready,
                    deleting)


def events(*states: PodState) -> list[PodEvent]:
    out, seen = [], set()
    for seq, state in enumerate(states):
        kind = "MODIFIED" if state.uid in seen else "ADDED"
        out.append(PodEvent(seq, float(seq), kind, state))
        seen.add(state.uid)
    return out


def digests(*requests: RecreateRequest) -> dict[tuple[str, int], WorkflowDigest]:
    by_key: dict[tuple[str, int], list[RecreateCall]] = {}
    for i, request in enumerate(requests):
        # scheduled at the epoch: before every event of these streams (their arrival times count from 0)
        by_key.setdefault(("avail", request.ref.replica), []).append(
            RecreateCall("wf", "run", i, datetime.fromtimestamp(0, UTC), request))
    return {key: WorkflowDigest("wf", [RunDigest("run", None, False, recreations=calls)])
            for key, calls in by_key.items()}


def recreate(replica: int = 0, pods: dict[str, str] | None = None,
             cliques: dict[str, str] | None = None) -> RecreateRequest:
    return RecreateRequest(ref=ref(replica), pods=pods or {}, cliques=cliques or {}, generation_hash="g")


def one_by_one() -> list[PodState]:
    """avail-0-frontend-0 then -1 recreated, each replacement Ready before the next deletion."""
    return [pod("avail-0-frontend-0", "a0"), pod("avail-0-frontend-1", "a1"),
            pod("avail-0-frontend-0", "a0", deleting=True),
            pod("avail-0-frontend-0", "b0", ready=False, hash_="new"), pod("avail-0-frontend-0", "b0", hash_="new"),
            pod("avail-0-frontend-1", "a1", deleting=True),
            pod("avail-0-frontend-1", "b1", ready=False, hash_="new"), pod("avail-0-frontend-1", "b1", hash_="new")]


def test_recreating_one_pod_at_a_time_stays_within_max_unavailable() -> None:
    found = rollout_invariants.rollout_budget_and_once(
        events(*one_by_one()), digests(recreate(pods={"avail-0-frontend-0": "a0"}),
                                       recreate(pods={"avail-0-frontend-1": "a1"})))
    assert found.violations == []
    assert found.counts["rollout_pod_deletions_checked"] == 2
    assert found.counts["rollout_max_units_down"] == 1


def test_two_ready_pods_of_one_clique_down_because_of_the_rollout_is_a_violation() -> None:
    states = [pod("avail-0-frontend-0", "a0"), pod("avail-0-frontend-1", "a1"),
              pod("avail-0-frontend-0", "a0", deleting=True), pod("avail-0-frontend-1", "a1", deleting=True)]
    found = rollout_invariants.rollout_budget_and_once(
        events(*states), digests(recreate(pods={"avail-0-frontend-0": "a0", "avail-0-frontend-1": "a1"})))
    assert [v.invariant for v in found.violations] == [rollout_invariants.ROLLOUT_BUDGET]
    # with a budget of 2 the same stream passes
    assert rollout_invariants.rollout_budget_and_once(
        events(*states), digests(recreate(pods={"avail-0-frontend-0": "a0", "avail-0-frontend-1": "a1"})),
        max_unavailable=2).violations == []


def test_a_pod_that_was_not_ready_when_the_rollout_deleted_it_costs_no_budget() -> None:
    states = [pod("avail-0-frontend-0", "a0", ready=False), pod("avail-0-frontend-1", "a1"),
              pod("avail-0-frontend-0", "a0", ready=False, deleting=True), pod("avail-0-frontend-1", "a1",
                                                                               deleting=True)]
    found = rollout_invariants.rollout_budget_and_once(
        events(*states), digests(recreate(pods={"avail-0-frontend-0": "a0", "avail-0-frontend-1": "a1"})))
    assert found.violations == []


def test_a_deletion_by_a_fault_or_a_termination_is_not_counted_as_the_rollouts() -> None:
    states = [pod("avail-0-frontend-0", "a0"), pod("avail-0-frontend-1", "a1"),
              pod("avail-0-frontend-0", "a0", deleting=True), pod("avail-0-frontend-1", "a1", deleting=True)]
    found = rollout_invariants.rollout_budget_and_once(events(*states), digests(recreate(pods={"avail-0-frontend-0":
                                                                                              "a0"})))
    assert found.violations == [] and found.counts["rollout_pod_deletions_checked"] == 1


def test_two_replicas_down_because_of_the_rollout_at_once_is_a_violation() -> None:
    states = [pod("avail-0-frontend-0", "a0"), pod("avail-1-frontend-0", "c0", replica=1),
              pod("avail-0-frontend-0", "a0", deleting=True), pod("avail-1-frontend-0", "c0", deleting=True, replica=1)]
    found = rollout_invariants.rollout_budget_and_once(
        events(*states), digests(recreate(0, pods={"avail-0-frontend-0": "a0"}),
                                 recreate(1, pods={"avail-1-frontend-0": "c0"})))
    assert [v.key.split("/")[0] for v in found.violations] == ["replicas"]


def test_a_pcsg_replica_is_one_unit_whatever_its_pod_count() -> None:
    group: dict[str, Any] = dict(pcsg="avail-0-prefill", pclq="avail-0-prefill-0-worker")
    states = [pod("avail-0-prefill-0-worker-0", "w0", pcsg_replica=0, **group),
              pod("avail-0-prefill-0-worker-1", "w1", pcsg_replica=0, **group),
              pod("avail-0-prefill-0-worker-0", "w0", pcsg_replica=0, deleting=True, **group),
              pod("avail-0-prefill-0-worker-1", "w1", pcsg_replica=0, deleting=True, **group)]
    clique = {"avail-0-prefill-0-worker": "pclq-avail-0-prefill-0-worker-0"}
    found = rollout_invariants.rollout_budget_and_once(events(*states), digests(recreate(cliques=clique)))
    assert found.violations == [] and found.counts["rollout_max_units_down"] == 1
    second: dict[str, Any] = dict(pcsg="avail-0-prefill", pclq="avail-0-prefill-1-worker")
    more = [*states, pod("avail-0-prefill-1-worker-0", "x0", pcsg_replica=1, **second),
            pod("avail-0-prefill-1-worker-0", "x0", pcsg_replica=1, deleting=True, **second)]
    both = {**clique, "avail-0-prefill-1-worker": "pclq-avail-0-prefill-1-worker-0"}
    found = rollout_invariants.rollout_budget_and_once(events(*more), digests(recreate(cliques=both)))
    assert [v.invariant for v in found.violations] == [rollout_invariants.ROLLOUT_BUDGET]


def test_a_pod_deleted_twice_at_one_template_or_recreated_to_its_own_hash_is_a_violation() -> None:
    states = [*one_by_one(), pod("avail-0-frontend-0", "b0", hash_="new", deleting=True),
              pod("avail-0-frontend-0", "c0", hash_="new")]
    found = rollout_invariants.rollout_budget_and_once(
        events(*states), digests(recreate(pods={"avail-0-frontend-0": "a0"}),
                                 recreate(pods={"avail-0-frontend-1": "a1"}),
                                 recreate(pods={"avail-0-frontend-0": "b0"})))
    assert sorted(v.key.split("/")[0] for v in found.violations) == ["same"]
    twice = [pod("avail-0-frontend-0", "a0"), pod("avail-0-frontend-0", "a0", deleting=True),
             pod("avail-0-frontend-0", "z0", ready=False), pod("avail-0-frontend-0", "z0", deleting=True,
                                                               ready=False)]
    found = rollout_invariants.rollout_budget_and_once(events(*twice), digests(
        recreate(pods={"avail-0-frontend-0": "a0"}), recreate(pods={"avail-0-frontend-0": "z0"})))
    assert {v.key.split("/")[0] for v in found.violations} == {"twice", "same"}


def pcs_obj(image: str, updated: int, replicas: int = 1) -> dict:
    clique = {"name": "frontend", "spec": {"replicas": 1, "minAvailable": 1, "podSpec": {
        "containers": [{"name": "c", "image": image}]}}}
    return {"apiVersion": names.GROVE_API_VERSION, "kind": names.KIND_PODCLIQUESET,
            "metadata": {"name": "avail", "namespace": "ns", "uid": "pcs-uid"},
            "spec": {"replicas": replicas, "template": {"cliques": [clique]}}, "status": {"updatedReplicas": updated}}


def live_pod(hash_: str) -> dict:
    return {"metadata": {"name": "avail-0-frontend-0", "ownerReferences": [
        {"kind": names.KIND_PODCLIQUE, "name": "avail-0-frontend", "uid": "u", "controller": True}], "labels": {
        names.LABEL_MANAGED_BY: names.MANAGED_BY, names.LABEL_PART_OF: "avail", names.LABEL_PODCLIQUE:
        "avail-0-frontend", names.LABEL_POD_TEMPLATE_HASH: hash_}}}


def test_a_rollout_is_complete_when_updated_replicas_match_and_every_pod_has_the_current_hash() -> None:
    from grove.rollout import pod_template_hashes
    from grove.validation import parse_pcs

    pcs = pcs_obj("img:2", updated=1)
    model, _ = parse_pcs(pcs)
    assert model is not None
    current = pod_template_hashes(model)["frontend"]
    assert rollout_invariants.rollout_complete([pcs], [live_pod(current)], 1).violations == []
    assert len(rollout_invariants.rollout_complete([pcs], [live_pod("stale")], 1).violations) == 1
    assert len(rollout_invariants.rollout_complete([pcs_obj("img:2", updated=0)], [live_pod(current)],
                                                   1).violations) == 1


def test_a_podclique_a_rollout_deleted_is_not_an_unexplained_deletion() -> None:
    labels = {names.LABEL_MANAGED_BY: names.MANAGED_BY, names.LABEL_PART_OF: "avail",
              names.LABEL_PCS_REPLICA_INDEX: "0"}
    record = PclqRecord(uid="u1", name="avail-0-prefill-0-worker", labels=labels, owner_kind="PodCliqueScalingGroup",
                        owner_uid="g", created=T0, first_seen=0.0, deletion_timestamp=T0, deleting_seen=1.0)
    digest = {("avail", 0): WorkflowDigest("wf", [RunDigest("run", None, False)])}
    failing = invariants.exactly_once(digest, {}, [], {}, {"u1": record}, set(), True)
    assert [v.key.split("/")[0] for v in failing.violations] == ["unexplained"]
    passing = invariants.exactly_once(digest, {}, [], {}, {"u1": record}, set(), True, rollout_cliques={"u1"})
    assert passing.violations == [] and passing.counts["pclq_rollout_deletions_seen"] == 1


def test_masked_is_the_update_in_progress_reason() -> None:
    cond = {"type": names.CONDITION_MIN_AVAILABLE_BREACHED, "status": "Unknown",
            "reason": names.REASON_UPDATE_IN_PROGRESS}
    assert rollout_invariants.masked({"status": {"conditions": [cond]}})
    assert not rollout_invariants.masked({"status": {"conditions": [{**cond, "reason": "Other"}]}})


def test_a_never_available_clique_holds_a_rollout_only_while_its_pcs_is_rolling() -> None:
    cond = {"type": names.CONDITION_MIN_AVAILABLE_BREACHED, "status": "False", "reason": names.REASON_NEVER_AVAILABLE}
    pclq = {"metadata": {"labels": {names.LABEL_PART_OF: "pcsgw"}}, "status": {"conditions": [cond]}}
    assert rollout_invariants.held_by_rollout(pclq, {"pcsgw"})
    assert not rollout_invariants.held_by_rollout(pclq, {"other"}), "its PCS's rollout is complete"
    breached = {**pclq, "status": {"conditions": [{**cond, "status": "True",
                                                   "reason": names.REASON_INSUFFICIENT_READY_PODS}]}}
    assert not rollout_invariants.held_by_rollout(breached, {"pcsgw"}), "a real breach must end in a termination"


def test_template_changes_are_drawn_from_the_seed_and_only_when_enabled() -> None:
    def plan(probability: float) -> list[list[schedule.Step]]:
        settings = schedule.Settings(template_change_probability=probability)
        planner = schedule.Planner(random.Random(3), {"avail": ["avail-0-frontend-0"]}, [], settings,
                                   changeable=("avail", "pcsg"))
        return [planner.plan_round() for _ in range(6)]

    always = plan(1.0)
    assert all(sum(s.action == schedule.TEMPLATE_CHANGE for s in steps) == 1 for steps in always)
    assert always == plan(1.0)
    changes = [s for steps in always for s in steps if s.action == schedule.TEMPLATE_CHANGE]
    assert {s.pcs for s in changes} <= {"avail", "pcsg"}
    assert {s.change for s in changes} <= {schedule.CHANGE_IMAGE, schedule.CHANGE_ENV}
    assert not any(s.action == schedule.TEMPLATE_CHANGE for steps in plan(0.0) for s in steps)


def test_a_pcsg_replica_that_was_unavailable_when_deleted_costs_no_budget() -> None:
    """grove.rollout.replica_step recreates unavailable PCSG replicas outside the budget: two at once is right."""
    one: dict[str, Any] = dict(pcsg="avail-0-prefill", pclq="avail-0-prefill-1-worker")
    two: dict[str, Any] = dict(pcsg="avail-0-prefill", pclq="avail-0-prefill-2-worker")
    states = [pod("avail-0-prefill-1-worker-0", "p1", pcsg_replica=1, ready=False, **one),  # broken
              pod("avail-0-prefill-1-worker-1", "q1", pcsg_replica=1, **one),
              pod("avail-0-prefill-2-worker-0", "p2", pcsg_replica=2, **two),
              pod("avail-0-prefill-1-worker-0", "p1", pcsg_replica=1, ready=False, deleting=True, **one),
              pod("avail-0-prefill-1-worker-1", "q1", pcsg_replica=1, deleting=True, **one),
              pod("avail-0-prefill-2-worker-0", "p2", pcsg_replica=2, deleting=True, **two)]
    cliques = {"avail-0-prefill-1-worker": "pclq-avail-0-prefill-1-worker-0",
               "avail-0-prefill-2-worker": "pclq-avail-0-prefill-2-worker-0"}
    found = rollout_invariants.rollout_budget_and_once(events(*states), digests(recreate(cliques=cliques)))
    assert found.violations == [] and found.counts["rollout_max_units_down"] == 1


def test_an_incarnation_that_went_before_the_rollout_step_is_not_the_rollouts() -> None:
    """A lost node's pod of the same PodClique was deleted earlier: not a second rollout deletion of its name."""
    stream = events(pod("avail-0-prefill-0-worker-0", "old"), pod("avail-0-prefill-0-worker-0", "old", deleting=True),
                    pod("avail-0-prefill-0-worker-0", "mid"), pod("avail-0-prefill-0-worker-0", "mid", deleting=True),
                    pod("avail-0-prefill-0-worker-0", "new", hash_="new"))
    stream = [PodEvent(e.seq, e.at, e.type, PodState(**{**vars(e.pod), **{
        "labels": {**e.pod.labels, names.LABEL_PCSG: "avail-0-prefill", names.LABEL_PCSG_REPLICA_INDEX: "0"}}}))
        for e in stream]
    call = RecreateCall("wf", "run", 1, datetime.fromtimestamp(2.5, UTC), recreate(
        cliques={"avail-0-prefill-0-worker": "pclq-avail-0-prefill-0-worker-0"}))
    found = rollout_invariants.rollout_budget_and_once(stream, {("avail", 0): WorkflowDigest(
        "wf", [RunDigest("run", None, False, recreations=[call])])})
    assert found.violations == [] and found.counts["rollout_pod_deletions_checked"] == 1


def _pcsg_stream(*steps: tuple[float, str, PodState]) -> list[PodEvent]:
    return [PodEvent(seq, at, kind, state) for seq, (at, kind, state) in enumerate(steps)]


def _group(replica: int) -> dict[str, Any]:
    return dict(pcsg="avail-0-prefill", pclq=f"avail-0-prefill-{replica}-worker", pcsg_replica=replica)


def _unit_step(at: float, *replicas: int, read_at: float | None = None) -> dict[tuple[str, int], WorkflowDigest]:
    cliques = {f"avail-0-prefill-{j}-worker": f"pclq-avail-0-prefill-{j}-worker-0" for j in replicas}
    read = datetime.fromtimestamp(read_at, UTC) if read_at is not None else None
    call = RecreateCall("wf", "run", 1, datetime.fromtimestamp(at, UTC), recreate(cliques=cliques), read)
    return {("avail", 0): WorkflowDigest("wf", [RunDigest("run", None, False, recreations=[call])])}


def lost_node_then_rollout() -> list[tuple[float, str, PodState]]:
    """PCSG replica 1 loses worker-0 with its node (the pod GC deletes it, ensure brings it back at the new template
    and it turns Ready), then one rollout step recreates replica 0 (within the budget) and replica 1 (unavailable a
    moment ago, so free) together."""
    w = "avail-0-prefill-{}-worker-{}"
    return [(1, "ADDED", pod(w.format(0, 0), "w0", **_group(0))), (1, "ADDED", pod(w.format(0, 1), "w1", **_group(0))),
            (1, "ADDED", pod(w.format(1, 0), "x0", **_group(1))), (1, "ADDED", pod(w.format(1, 1), "x1", **_group(1))),
            (10, "DELETED", pod(w.format(1, 0), "x0", deleting=True, **_group(1))),
            (10.5, "ADDED", pod(w.format(1, 0), "y0", ready=False, hash_="new", **_group(1))),
            (11, "MODIFIED", pod(w.format(1, 0), "y0", hash_="new", **_group(1))),
            (13, "MODIFIED", pod(w.format(0, 0), "w0", deleting=True, **_group(0))),
            (13, "MODIFIED", pod(w.format(0, 1), "w1", deleting=True, **_group(0))),
            (13, "MODIFIED", pod(w.format(1, 0), "y0", deleting=True, hash_="new", **_group(1))),
            (13, "MODIFIED", pod(w.format(1, 1), "x1", deleting=True, **_group(1))),
            (14, "ADDED", recreated(pod(w.format(1, 0), "z0", hash_="new", **_group(1)))),
            (14, "ADDED", recreated(pod(w.format(1, 1), "z1", hash_="new", **_group(1))))]


def recreated(state: PodState) -> PodState:
    """The pod of a PodClique the rollout recreated: a new owner UID."""
    return dataclasses.replace(state, owner_uid=state.owner_uid + "-new")


def test_a_pcsg_replica_missing_a_pod_just_before_the_step_costs_no_budget() -> None:
    """Fault run seed 12 round 13: a lost node's pods are gone (not NotReady) when their replica is picked; the
    step was scheduled 1.5 s after the replica was whole again, inside the slack for the product's read."""
    found = rollout_invariants.rollout_budget_and_once(_pcsg_stream(*lost_node_then_rollout()), _unit_step(12.5, 0, 1))
    assert found.violations == [] and found.counts["rollout_max_units_down"] == 1
    # the history's read says when the product looked: at 10.2 s replica 1 was missing a pod (free); had it looked
    # at 12 s, replica 1 was whole again and picking both replicas broke the budget
    found = rollout_invariants.rollout_budget_and_once(_pcsg_stream(*lost_node_then_rollout()),
                                                       _unit_step(12.5, 0, 1, read_at=10.2))
    assert found.violations == []
    found = rollout_invariants.rollout_budget_and_once(_pcsg_stream(*lost_node_then_rollout()),
                                                       _unit_step(12.5, 0, 1, read_at=12.0))
    assert {v.invariant for v in found.violations} == {rollout_invariants.ROLLOUT_BUDGET}
    # decided long after replica 1 was whole again, both replicas cost budget: two down at once
    found = rollout_invariants.rollout_budget_and_once(_pcsg_stream(*lost_node_then_rollout()), _unit_step(12.9 + 30, 0, 1))
    assert found.violations == []  # the deletions at 13 s came before that step: not the rollout's
    late = [(at + 30 if at >= 13 else at, kind, state) for at, kind, state in lost_node_then_rollout()]
    found = rollout_invariants.rollout_budget_and_once(_pcsg_stream(*late), _unit_step(42.5, 0, 1))
    assert {v.invariant for v in found.violations} == {rollout_invariants.ROLLOUT_BUDGET}
    assert found.counts["rollout_max_units_down"] == 2


def test_a_recreated_pcsg_replica_takes_its_updated_pods_along_but_must_have_been_outdated() -> None:
    """y0 was already at the new hash and comes back at it (Grove's unit is the whole replica): fine. A replica every
    pod of which comes back at the hash it had was not outdated: a second recreation for one change."""
    found = rollout_invariants.rollout_budget_and_once(_pcsg_stream(*lost_node_then_rollout()), _unit_step(12.5, 0, 1))
    assert not [v for v in found.violations if v.invariant == rollout_invariants.ROLLOUT_ONCE]
    w = "avail-0-prefill-1-worker-{}"
    again = [*lost_node_then_rollout(),
             (15, "MODIFIED", recreated(pod(w.format(0), "z0", deleting=True, hash_="new", **_group(1)))),
             (15, "MODIFIED", recreated(pod(w.format(1), "z1", deleting=True, hash_="new", **_group(1)))),
             (16, "ADDED", pod(w.format(0), "v0", hash_="new", **_group(1))),
             (16, "ADDED", pod(w.format(1), "v1", hash_="new", **_group(1)))]
    first = _unit_step(12.5, 0, 1)[("avail", 0)].runs[0].recreations[0]
    second = RecreateCall("wf", "run", 2, datetime.fromtimestamp(14.5, UTC), recreate(
        cliques={"avail-0-prefill-1-worker": "pclq-avail-0-prefill-1-worker-0-new"}))
    found = rollout_invariants.rollout_budget_and_once(_pcsg_stream(*again), {("avail", 0): WorkflowDigest(
        "wf", [RunDigest("run", None, False, recreations=[first, second])])})
    assert [v.key.split("/")[0] for v in found.violations] == ["unit"]


def test_a_deletion_seen_after_the_histories_were_read_waits_for_a_later_check() -> None:
    """The step that asked for it may be scheduled after the read (round 28 of fault run seed 12): judge it on
    histories read after it was seen, never on older ones."""
    labels = {names.LABEL_MANAGED_BY: names.MANAGED_BY, names.LABEL_PART_OF: "avail",
              names.LABEL_PCS_REPLICA_INDEX: "0"}
    record = PclqRecord(uid="u1", name="avail-0-prefill-1-worker", labels=labels, owner_kind="PodCliqueScalingGroup",
                        owner_uid="g", created=T0, first_seen=0.0, deletion_timestamp=T0, deleting_seen=5.0)
    digest = {("avail", 0): WorkflowDigest("wf", [RunDigest("run", None, False)])}
    deferred = invariants.exactly_once(digest, {}, [], {}, {"u1": record}, set(), True, histories_read_at=4.0)
    assert deferred.violations == [] and deferred.counts["pclq_deletions_seen"] == 0
    judged = invariants.exactly_once(digest, {}, [], {}, {"u1": record}, set(), True, histories_read_at=6.0)
    assert [v.key.split("/")[0] for v in judged.violations] == ["unexplained"]


def test_a_pod_the_pod_gc_removed_just_before_the_step_is_not_the_rollouts() -> None:
    """Fault run seed 14 round 1 (2a5cbb9): replica 1 was recreated and its worker pods are not Ready yet; the pod GC
    removes replica 2's worker-1 with its lost node at 11.1 s; ensure brings it back (not Ready) and the step read at
    11.6 s recreates replica 2 as unavailable, outside the budget, scheduled at 12.06 s. The GC's deletion came before
    the step was scheduled, so it is not the rollout's and replica 2 costs nothing: one unit down, not two."""
    w = "avail-0-prefill-{}-worker-{}"
    stream = [(1, "ADDED", pod(w.format(1, 0), "x0", **_group(1))), (1, "ADDED", pod(w.format(1, 1), "x1", **_group(1))),
              (1, "ADDED", pod(w.format(2, 0), "y0", **_group(2))), (1, "ADDED", pod(w.format(2, 1), "y1", **_group(2))),
              # an earlier step took replica 1 down (its new pods are not Ready before 12.5 s)
              (5, "MODIFIED", pod(w.format(1, 0), "x0", deleting=True, **_group(1))),
              (5, "MODIFIED", pod(w.format(1, 1), "x1", deleting=True, **_group(1))),
              (6, "DELETED", pod(w.format(1, 0), "x0", deleting=True, **_group(1))),
              (6, "DELETED", pod(w.format(1, 1), "x1", deleting=True, **_group(1))),
              (11.1, "MODIFIED", pod(w.format(2, 1), "y1", deleting=True, **_group(2))),  # the pod GC
              (11.1, "DELETED", pod(w.format(2, 1), "y1", deleting=True, **_group(2))),
              (11.8, "ADDED", recreated(pod(w.format(1, 0), "n0", ready=False, hash_="new", **_group(1)))),
              (11.8, "ADDED", recreated(pod(w.format(1, 1), "n1", ready=False, hash_="new", **_group(1)))),
              (11.8, "ADDED", pod(w.format(2, 1), "y2", ready=False, **_group(2))),  # ensure, old template
              (12.1, "MODIFIED", pod(w.format(2, 0), "y0", deleting=True, **_group(2))),
              (12.1, "MODIFIED", pod(w.format(2, 1), "y2", ready=False, deleting=True, **_group(2))),
              (12.5, "MODIFIED", recreated(pod(w.format(1, 0), "n0", hash_="new", **_group(1)))),
              (12.5, "MODIFIED", recreated(pod(w.format(1, 1), "n1", hash_="new", **_group(1)))),
              (13, "ADDED", recreated(pod(w.format(2, 0), "m0", hash_="new", **_group(2)))),
              (13, "ADDED", recreated(pod(w.format(2, 1), "m1", hash_="new", **_group(2))))]
    first = RecreateCall("wf", "run", 1, datetime.fromtimestamp(4.9, UTC),
                         recreate(cliques={"avail-0-prefill-1-worker": "pclq-avail-0-prefill-1-worker-0"}),
                         datetime.fromtimestamp(4.8, UTC))
    second = RecreateCall("wf", "run", 2, datetime.fromtimestamp(12.06, UTC),
                          recreate(cliques={"avail-0-prefill-2-worker": "pclq-avail-0-prefill-2-worker-0"}),
                          datetime.fromtimestamp(11.6, UTC))
    digest = {("avail", 0): WorkflowDigest("wf", [RunDigest("run", None, False, recreations=[first, second])])}
    found = rollout_invariants.rollout_budget_and_once(_pcsg_stream(*stream), digest)
    assert found.violations == [] and found.counts["rollout_max_units_down"] == 1
    # had replica 2 been whole when the step was decided, picking it with replica 1 still down breaks the budget
    whole = [s for s in stream if s[2].uid not in ("y1", "y2")]
    whole += [(1, "ADDED", pod(w.format(2, 1), "y1", **_group(2))),
              (12.1, "MODIFIED", pod(w.format(2, 1), "y1", deleting=True, **_group(2)))]
    whole.sort(key=lambda s: s[0])
    found = rollout_invariants.rollout_budget_and_once(_pcsg_stream(*whole), digest)
    assert {v.invariant for v in found.violations} == {rollout_invariants.ROLLOUT_BUDGET}
