"""grove.rollout: hashes, validation of the update fields, and the RollingRecreate decisions (DESIGN §4.9)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grove import names
from grove.plan import plan_replica
from grove.rollout import (
    CliqueProgress,
    ComponentPolicy,
    ProgressMark,
    ReplicaRollout,
    ReplicaStep,
    RolloutSpec,
    advance_progress,
    deadline_due,
    generation_hash,
    next_replica,
    pod_template_hashes,
    replica_step,
    replica_updated,
    rollout_spec,
)
from grove.topology import CliqueUnit, ReplicaTopology, ScalingGroupUnit
from grove.validation import parse_pcs, validate_pcs

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def manifest(**template: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "grove.io/v1alpha1",
        "kind": "PodCliqueSet",
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {
            "replicas": 2,
            "template": {
                "cliques": [
                    {"name": "fe", "spec": {"replicas": 2, "podSpec": {"containers": [{"name": "c", "image": "a:1"}]}}},
                    {"name": "w", "spec": {"replicas": 1, "podSpec": {"containers": [{"name": "c", "image": "b:1"}]}}},
                ],
                "podCliqueScalingGroups": [{"name": "sg", "cliqueNames": ["w"], "replicas": 3, "minAvailable": 1}],
            },
        },
    }
    body["spec"]["template"].update(template)
    return body


def parsed(body: dict[str, Any]) -> Any:
    pcs, problems = parse_pcs(body)
    assert pcs is not None and not problems, problems
    return pcs


# --- hashes ---------------------------------------------------------------------------------------------------
def test_a_pod_spec_change_changes_that_cliques_hash_and_the_generation_hash_only() -> None:
    before = parsed(manifest())
    changed = manifest()
    changed["spec"]["template"]["cliques"][0]["spec"]["podSpec"]["containers"][0]["image"] = "a:2"
    after = parsed(changed)
    assert pod_template_hashes(before)["fe"] != pod_template_hashes(after)["fe"]
    assert pod_template_hashes(before)["w"] == pod_template_hashes(after)["w"]
    assert generation_hash(before) != generation_hash(after)


@pytest.mark.parametrize("edit", [
    lambda t: t["cliques"][0]["spec"].update(replicas=5),
    lambda t: t["cliques"][0]["spec"].update(minAvailable=1),
    lambda t: t.update(terminationDelay="1m"),
    lambda t: t["podCliqueScalingGroups"][0].update(replicas=5),
    lambda t: t["cliques"][0].update(rollingUpdate={"maxUnavailable": 2}),
])
def test_changes_that_need_no_new_pods_keep_every_hash(edit: Any) -> None:
    body = manifest()
    edit(body["spec"]["template"])
    assert generation_hash(parsed(body)) == generation_hash(parsed(manifest()))
    assert pod_template_hashes(parsed(body)) == pod_template_hashes(parsed(manifest()))


@pytest.mark.parametrize("edit", [
    lambda t: t["cliques"][1].update(labels={"a": "b"}),
    lambda t: t["cliques"][1].update(annotations={"a": "b"}),
    lambda t: t.update(priorityClassName="high"),
    lambda t: t["cliques"][1]["spec"]["podSpec"].update(nodeSelector={"x": "y"}),
])
def test_changes_that_need_new_pods_change_the_hash(edit: Any) -> None:
    body = manifest()
    edit(body["spec"]["template"])
    assert pod_template_hashes(parsed(body))["w"] != pod_template_hashes(parsed(manifest()))["w"]


def test_pods_are_labelled_with_their_cliques_template_hash() -> None:
    pcs = parsed(manifest())
    plan = plan_replica(pcs, 0)
    hashes = pod_template_hashes(pcs)
    for pod in plan.pods():
        assert pod.labels[names.LABEL_POD_TEMPLATE_HASH] == hashes[pod.clique]
        assert len(hashes[pod.clique]) == 10


# --- validation -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("edit", "problem"), [
    (lambda s: s.update(updateStrategy={"type": "Rolling"}),
     "spec.updateStrategy.type: must be one of RollingRecreate, OnDelete, got 'Rolling'"),
    (lambda s: s["template"]["cliques"][0].update(rollingUpdate={"maxUnavailable": 0}),
     "spec.template.cliques[0].rollingUpdate.maxUnavailable: must be at least 1, got 0"),
    (lambda s: s["template"]["cliques"][0].update(rollingUpdate={"progressDeadline": "0s"}),
     "spec.template.cliques[0].rollingUpdate.progressDeadline: must be greater than 0 (omit it for no deadline)"),
    (lambda s: s["template"]["cliques"][1].update(rollingUpdate={"maxUnavailable": 1}),
     "spec.template.cliques[1].rollingUpdate: clique 'w' belongs to a podCliqueScalingGroup: set rollingUpdate on "
     "the scaling group instead"),
    (lambda s: (s.update(updateStrategy={"type": "OnDelete"}),
                s["template"]["podCliqueScalingGroups"][0].update(rollingUpdate={"maxUnavailable": 1})),
     "spec.template.podCliqueScalingGroups[0].rollingUpdate: must not be set when spec.updateStrategy.type is "
     "OnDelete (nothing is rolled)"),
])
def test_bad_update_fields_are_named(edit: Any, problem: str) -> None:
    body = manifest()
    edit(body["spec"])
    assert problem in [str(p) for p in validate_pcs(body)]


def test_valid_update_fields_pass_and_reach_the_policy() -> None:
    body = manifest()
    body["spec"]["updateStrategy"] = {"type": "RollingRecreate"}
    body["spec"]["template"]["cliques"][0]["rollingUpdate"] = {"maxUnavailable": 2, "progressDeadline": "5m"}
    body["spec"]["template"]["podCliqueScalingGroups"][0]["rollingUpdate"] = {"maxUnavailable": 3}
    assert validate_pcs(body) == []
    pcs = parsed(body)
    spec = rollout_spec(pcs, plan_replica(pcs, 1).topology())
    assert spec.components == {
        "p-1-fe": ComponentPolicy(max_unavailable=2, progress_deadline=timedelta(minutes=5)),
        "p-1-sg": ComponentPolicy(max_unavailable=3),
    }
    assert spec.strategy == "RollingRecreate" and spec.generation_hash == generation_hash(pcs)


def test_defaults_are_groves() -> None:
    pcs = parsed(manifest())
    spec = rollout_spec(pcs, plan_replica(pcs, 0).topology())
    assert spec.strategy == names.STRATEGY_ROLLING_RECREATE
    assert all(p == ComponentPolicy(max_unavailable=1, progress_deadline=None) for p in spec.components.values())


# --- one replica's step ---------------------------------------------------------------------------------------
def topology(fe_replicas: int = 3, fe_min: int = 2, sg_replicas: int = 3, sg_min: int = 1) -> ReplicaTopology:
    cliques = [CliqueUnit(name="p-0-fe", clique="fe", replicas=fe_replicas, min_available=fe_min)]
    cliques += [CliqueUnit(name=f"p-0-sg-{j}-w", clique="w", replicas=2, min_available=1, scaling_group="p-0-sg",
                           scaling_group_replica=j) for j in range(sg_replicas)]
    return ReplicaTopology(pcs="p", replica=0, cliques=tuple(cliques), scaling_groups=(
        ScalingGroupUnit(name="p-0-sg", config_name="sg", replicas=sg_replicas, min_available=sg_min),))


def spec(fe: int = 1, sg: int = 1, deadline: timedelta | None = None) -> RolloutSpec:
    return RolloutSpec(generation_hash="new", components={
        "p-0-fe": ComponentPolicy(max_unavailable=fe, progress_deadline=deadline),
        "p-0-sg": ComponentPolicy(max_unavailable=sg, progress_deadline=deadline)})


def clique(name: str, pods: dict[int, tuple[bool, bool]], uid: str = "u") -> CliqueProgress:
    """pods: index -> (outdated, ready)."""
    outdated = {f"{name}-{i}": f"uid-{name}-{i}" for i, (old, _) in pods.items() if old}
    return CliqueProgress(
        uid=uid, pods=len(pods), ready=sum(r for _, r in pods.values()), outdated=outdated,
        outdated_ready=tuple(sorted(f"{name}-{i}" for i, (old, r) in pods.items() if old and r)),
        updated_ready=sum(1 for old, r in pods.values() if not old and r))


def all_old(top: ReplicaTopology) -> dict[str, CliqueProgress]:
    return {u.name: clique(u.name, {i: (True, True) for i in range(u.replicas)}, uid=f"uid-{u.name}")
            for u in top.cliques}


def test_first_step_recreates_one_pod_and_one_pcsg_replica_lowest_first() -> None:
    top = topology()
    step = replica_step(top, all_old(top), spec())
    assert step.delete_pods == {"p-0-fe-0": "uid-p-0-fe-0"}
    assert step.delete_cliques == {"p-0-sg-0-w": "uid-p-0-sg-0-w"}
    assert step.in_progress == {u.name for u in top.cliques}
    assert not step.done and step.acting == {"p-0-fe", "p-0-sg"}


def test_budget_counts_pods_already_unavailable() -> None:
    top = topology()
    cliques = all_old(top)
    cliques["p-0-fe"] = clique("p-0-fe", {0: (False, False), 1: (True, True), 2: (True, True)})
    step = replica_step(top, cliques, spec(fe=1))
    assert step.delete_pods == {}  # the recreated pod 0 is not Ready yet: the budget of 1 is used
    assert "p-0-fe" in step.pending
    assert replica_step(top, cliques, spec(fe=2)).delete_pods == {"p-0-fe-1": "uid-p-0-fe-1"}


def test_outdated_pods_that_are_not_ready_go_at_once() -> None:
    top = topology()
    cliques = all_old(top)
    cliques["p-0-fe"] = clique("p-0-fe", {0: (True, False), 1: (True, False), 2: (True, True)})
    step = replica_step(top, cliques, spec(fe=1))
    assert set(step.delete_pods) == {"p-0-fe-0", "p-0-fe-1"}


def test_a_missing_pod_counts_as_unavailable() -> None:
    top = topology()
    cliques = all_old(top)
    cliques["p-0-fe"] = clique("p-0-fe", {1: (True, True), 2: (True, True)})
    assert replica_step(top, cliques, spec(fe=1)).delete_pods == {}


def test_pcsg_replicas_unavailable_go_at_once_and_available_ones_within_budget() -> None:
    top = topology()
    cliques = all_old(top)
    cliques["p-0-sg-2-w"] = clique("p-0-sg-2-w", {0: (True, False), 1: (True, False)}, uid="uid-p-0-sg-2-w")
    step = replica_step(top, cliques, spec(sg=1))
    assert step.delete_cliques == {"p-0-sg-2-w": "uid-p-0-sg-2-w"}  # unavailable already; budget used by it
    assert set(replica_step(top, cliques, spec(sg=2)).delete_cliques) == {"p-0-sg-0-w", "p-0-sg-2-w"}


def test_a_pcsg_replica_being_recreated_is_not_recreated_again() -> None:
    top = topology()
    cliques = all_old(top)
    del cliques["p-0-sg-0-w"]  # deleted, not recreated yet
    step = replica_step(top, cliques, spec(sg=1))
    assert step.delete_cliques == {}
    cliques["p-0-sg-0-w"] = clique("p-0-sg-0-w", {0: (False, False), 1: (False, False)})  # recreated, starting
    assert replica_step(top, cliques, spec(sg=1)).delete_cliques == {}


def test_done_when_every_podclique_is_updated_and_ready_to_min_available() -> None:
    top = topology()
    cliques = {u.name: clique(u.name, {i: (False, True) for i in range(u.replicas)}) for u in top.cliques}
    cliques["p-0-fe"] = clique("p-0-fe", {0: (False, True), 1: (False, True), 2: (False, False)})
    step = replica_step(top, cliques, spec())
    assert step.done and step.in_progress == frozenset() and replica_updated(top, cliques)
    cliques["p-0-fe"] = clique("p-0-fe", {0: (False, True), 1: (False, False), 2: (False, False)})
    step = replica_step(top, cliques, spec())
    assert not step.done and step.in_progress == {"p-0-fe"} and not replica_updated(top, cliques)


@st.composite
def rollouts(draw: st.DrawFn) -> tuple[ReplicaTopology, RolloutSpec, list[set[str]], dict[str, bool]]:
    fe = draw(st.integers(1, 5))
    sg = draw(st.integers(1, 4))
    top = topology(fe_replicas=fe, fe_min=draw(st.integers(1, fe)), sg_replicas=sg, sg_min=draw(st.integers(1, sg)))
    policy = spec(fe=draw(st.integers(1, 3)), sg=draw(st.integers(1, 3)))
    pods = [f"{u.name}-{i}" for u in top.cliques for i in range(u.replicas)]
    ticks = draw(st.lists(st.sets(st.sampled_from(pods)), min_size=0, max_size=30))
    initially_ready = {p: draw(st.booleans()) for p in pods}
    return top, policy, ticks, initially_ready


@settings(deadline=None, max_examples=150)
@given(rollouts())
def test_a_simulated_rollout_keeps_the_budget_recreates_each_pod_once_and_finishes(case: Any) -> None:
    """Pods become Ready when a tick names them (then every pod, so the rollout must finish)."""
    top, policy, ticks, initially_ready = case
    pods: dict[str, dict[str, tuple[bool, bool]]] = {
        u.name: {f"{u.name}-{i}": (True, initially_ready[f"{u.name}-{i}"]) for i in range(u.replicas)}
        for u in top.cliques}
    recreated: list[str] = []
    every = {p for c in pods.values() for p in c}
    units = {u.name: u for u in top.cliques}

    def view() -> dict[str, CliqueProgress]:
        result = {}
        for name, members in pods.items():
            outdated = {p: f"uid-{p}" for p, (old, _) in members.items() if old}
            result[name] = CliqueProgress(
                uid=name, pods=len(members), ready=sum(r for _, r in members.values()), outdated=outdated,
                outdated_ready=tuple(p for p, (old, r) in members.items() if old and r),
                updated_ready=sum(1 for old, r in members.values() if not old and r))
        return result

    def unavailable_fe() -> int:
        return units["p-0-fe"].replicas - sum(r for _, r in pods["p-0-fe"].values())

    def unavailable_sg() -> int:
        return sum(1 for j in range(top.scaling_groups[0].replicas)
                   if not all(sum(r for _, r in pods[u.name].values()) >= u.min_available
                              for u in top.members("p-0-sg", j)))

    for ready_now in [*ticks, *([every] * 40)]:
        step = replica_step(top, view(), policy)
        if step.done:
            break
        before_fe, before_sg = unavailable_fe(), unavailable_sg()
        for pod in step.delete_pods:
            owner = pod.rsplit("-", 1)[0]
            assert pods[owner][pod][0], "only outdated pods are recreated"
            pods[owner][pod] = (False, False)  # deleted and recreated from the new template, not Ready yet
            recreated.append(pod)
        for name in step.delete_cliques:
            assert any(old for old, _ in pods[name].values())
            for pod in pods[name]:
                pods[name][pod] = (False, False)
                recreated.append(pod)
        assert unavailable_fe() <= max(policy.components["p-0-fe"].max_unavailable, before_fe)
        assert unavailable_sg() <= max(policy.components["p-0-sg"].max_unavailable, before_sg)
        for members in pods.values():
            for pod, (old, _) in members.items():
                if pod in ready_now:
                    members[pod] = (old, True)
    assert replica_step(top, view(), policy).done
    assert len(recreated) == len(set(recreated)), "a pod was recreated twice for one change"
    assert all(not old for members in pods.values() for old, _ in members.values())


# --- progressDeadline ------------------------------------------------------------------------------------
def _one_pod_stuck() -> tuple[ReplicaStep, RolloutSpec]:
    """A rollout whose frontend has one pod that never becomes Ready; progressDeadline one minute."""
    top = topology()
    cliques = all_old(top)
    cliques["p-0-fe"] = clique("p-0-fe", {0: (False, False), 1: (True, True), 2: (True, True)})
    policy = spec(deadline=timedelta(minutes=1))
    return replica_step(top, cliques, policy), policy


def test_progress_deadline_counts_from_the_last_progress() -> None:
    step, policy = _one_pod_stuck()
    marks, exceeded = advance_progress({}, step, T0, policy)
    assert exceeded == ()
    assert deadline_due(marks, step, policy) == T0 + timedelta(minutes=1)
    # the stuck pod never becomes Ready; the PCSG keeps recreating (its replicas progress)
    marks2, exceeded = advance_progress(marks, step.model_copy(update={"acting": frozenset({"p-0-sg"})}),
                                        T0 + timedelta(seconds=61), policy)
    assert exceeded == ("p-0-fe",)
    assert marks2["p-0-sg"].since == T0 + timedelta(seconds=61)


def test_with_due_by_the_progress_deadline_is_exceeded_only_once_its_timer_fired() -> None:
    """The replica workflow passes `due_by`: the latest progress deadline a durable timer fired for. Workflow time
    (`now`) stamps progress but no longer decides: a replay may run at another time."""
    step, policy = _one_pod_stuck()
    marks, _ = advance_progress({}, step, T0, policy)
    due = deadline_due(marks, step, policy)
    assert due == T0 + timedelta(minutes=1)
    late = T0 + timedelta(hours=1)
    assert advance_progress(marks, step, late, policy, due_by=due - timedelta(milliseconds=1))[1] == ()
    assert "p-0-fe" in advance_progress(marks, step, T0, policy, due_by=due)[1]


def test_a_finished_component_never_exceeds() -> None:
    top = topology()
    cliques = {u.name: clique(u.name, {i: (False, True) for i in range(u.replicas)}) for u in top.cliques}
    policy = spec(deadline=timedelta(seconds=1))
    step = replica_step(top, cliques, policy)
    marks = {c: ProgressMark(value=v, since=T0) for c, v in step.progress.items()}
    assert advance_progress(marks, step, T0 + timedelta(hours=1), policy)[1] == ()
    assert deadline_due(marks, step, policy) is None


# --- across the PCS -------------------------------------------------------------------------------------------
def test_next_replica_unavailable_first_then_by_index() -> None:
    rs = [ReplicaRollout(index=0, updated=False, available=True, outdated=True),
          ReplicaRollout(index=1, updated=True, available=True),
          ReplicaRollout(index=2, updated=False, available=False, outdated=True),
          ReplicaRollout(index=3, updated=False, available=False, outdated=True)]
    assert next_replica(rs) == 2
    # not Ready but already at the new template: no turn (a real breach there is gang termination's business)
    assert next_replica([ReplicaRollout(index=0, updated=False, available=False)]) is None
    assert next_replica(rs[:2]) == 0
    assert next_replica([rs[1]]) is None
    assert next_replica([]) is None


def test_manifest_helper_is_not_shared_state() -> None:
    body = manifest()
    copy.deepcopy(body)["spec"]["replicas"] = 9
    assert manifest()["spec"]["replicas"] == 2
