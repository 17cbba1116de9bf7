"""Issue 13's pure domain: replica counts owned by the objects (grove.scale), startup order (grove.startup),
HorizontalPodAutoscalers (grove.autoscaling) and Grove fields not implemented (grove.fields), on Grove's own samples
simple1/2/3 (operator/samples/simple, copied unchanged into tests/unit/data/grove_samples)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from grove import manifests, names
from grove.autoscaling import hpa_differs, hpa_manifests
from grove.models import PodCliqueSet
from grove.plan import plan_replica
from grove.scale import (
    ObservedCounts,
    clamped,
    most_indices,
    most_pods,
    most_scaling_group_replicas,
    observed_counts,
    podclique_selector,
    scaling_group_selector,
)
from grove.startup import CliqueStartupState, decide_starts
from grove.validation import check_document, validate_pcs

SAMPLES = Path(__file__).parent / "data" / "grove_samples"


def sample(name: str) -> dict[str, Any]:
    return yaml.safe_load((SAMPLES / name).read_text())


SIMPLE1 = sample("simple1.yaml")
SIMPLE2 = sample("simple2-explicit-startup-order.yaml")
SIMPLE3 = sample("simple3-explicit-startup-order.yaml")


def pcs_of(data: dict[str, Any]) -> PodCliqueSet:
    return PodCliqueSet.model_validate(data)


def paths(problems: list[Any]) -> list[str]:
    return [p.path for p in problems]


# --- Grove's samples -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("data", [SIMPLE1, SIMPLE2, SIMPLE3], ids=["simple1", "simple2", "simple3"])
def test_grove_samples_are_valid_and_nothing_in_them_is_ignored(data: dict[str, Any]) -> None:
    problems, warnings = check_document(data)
    assert problems == [] and warnings == []


def test_simple2_order_is_pca_then_pcb_pcc_then_pcd() -> None:
    plan = plan_replica(pcs_of(SIMPLE2), 0)
    order = {p.clique: p.starts_after for p in plan.pod_cliques}
    assert order == {"pca": (), "pcb": ("simple2-0-pca",), "pcc": ("simple2-0-pca",),
                     "pcd": ("simple2-0-pcb", "simple2-0-pcc")}


def test_simple3_order_holds_inside_each_podgang_only() -> None:
    plan = plan_replica(pcs_of(SIMPLE3), 0)
    after = {p.name: p.starts_after for p in plan.pod_cliques}
    # base gang: pca, sga replicas 0 and 1 (minAvailable 2), pce
    assert after["simple3-0-pca"] == ()
    assert after["simple3-0-sga-0-pcb"] == after["simple3-0-sga-1-pcc"] == ("simple3-0-pca",)
    assert after["simple3-0-sga-1-pcd"] == ("simple3-0-sga-0-pcb", "simple3-0-sga-0-pcc",
                                            "simple3-0-sga-1-pcb", "simple3-0-sga-1-pcc")
    assert after["simple3-0-pce"] == after["simple3-0-sga-0-pcd"]
    # scaled gang simple3-0-sga-0 (sga replica 2): pca is in the base gang, so pcb/pcc start at once
    assert after["simple3-0-sga-2-pcb"] == after["simple3-0-sga-2-pcc"] == ()
    assert after["simple3-0-sga-2-pcd"] == ("simple3-0-sga-2-pcb", "simple3-0-sga-2-pcc")
    topology = plan.topology()
    assert {u.name: u.starts_after for u in topology.cliques} == after


def explicit(*cliques: tuple[str, list[str]]) -> dict[str, Any]:
    return {
        "apiVersion": "grove.io/v1alpha1", "kind": "PodCliqueSet", "metadata": {"name": "order"},
        "spec": {"template": {"cliqueStartupType": names.STARTUP_EXPLICIT, "cliques": [
            {"name": name, "spec": {"replicas": 1, "startsAfter": after, "podSpec": {"containers": []}}}
            for name, after in cliques]}},
    }


def test_in_order_startup_follows_the_list_of_cliques() -> None:
    data = explicit(("a", []), ("b", []), ("c", []))
    data["spec"]["template"]["cliqueStartupType"] = names.STARTUP_IN_ORDER
    after = {p.clique: p.starts_after for p in plan_replica(pcs_of(data), 0).pod_cliques}
    assert after == {"a": (), "b": ("order-0-a",), "c": ("order-0-b",)}


def test_startup_cycles_unknown_self_and_duplicate_names_are_rejected_with_their_paths() -> None:
    problems = validate_pcs(explicit(("a", ["c"]), ("b", ["a", "a"]), ("c", ["b", "c", "ghost", ""])))
    text = [str(p) for p in problems]
    assert "spec.template.cliques[1].spec.startsAfter[1]: clique 'a' is listed twice" in text
    assert "spec.template.cliques[2].spec.startsAfter[1]: clique 'c' cannot start after itself" in text
    assert "spec.template.cliques[2].spec.startsAfter[2]: unknown clique 'ghost'" in text
    assert "spec.template.cliques[2].spec.startsAfter[3]: must not be empty" in text
    assert "spec.template.cliques[0].spec.startsAfter: circular startup dependency: a -> c -> b -> a" in text
    assert validate_pcs(explicit(("a", []), ("b", ["a"]), ("c", ["a", "b"]))) == []


def test_a_bad_startup_type_is_rejected_and_starts_after_without_explicit_is_a_warning() -> None:
    data = explicit(("a", []), ("b", ["a"]))
    data["spec"]["template"]["cliqueStartupType"] = "Sequential"
    assert paths(validate_pcs(data)) == ["spec.template.cliqueStartupType"]
    data["spec"]["template"]["cliqueStartupType"] = names.STARTUP_ANY_ORDER
    problems, warnings = check_document(data)
    assert problems == []
    assert [str(w) for w in warnings] == [
        "spec.template.cliques[1].spec.startsAfter: ignored: spec.template.cliqueStartupType is "
        "CliqueStartupTypeAnyOrder, not CliqueStartupTypeExplicit"]
    assert plan_replica(pcs_of(data), 0).pod_clique("order-0-b").starts_after == ()


def test_decode_waits_until_every_prefill_pod_is_ready() -> None:
    topology = plan_replica(pcs_of(SIMPLE2), 0).topology()
    waiting = {"simple2-0-pcb": CliqueStartupState(pods=2, ready=0, waiting=("simple2-0-pcb-0", "simple2-0-pcb-1"))}
    not_yet = decide_starts(topology, {"simple2-0-pca": CliqueStartupState(pods=3, ready=2), **waiting})
    assert not_yet.pods == () and not_yet.waiting["simple2-0-pcb"] == ("simple2-0-pca",)
    assert "simple2-0-pcb waits for simple2-0-pca Ready (2/3)" in not_yet.lines({"simple2-0-pca": (2, 3)})
    ready = decide_starts(topology, {"simple2-0-pca": CliqueStartupState(pods=3, ready=3), **waiting})
    assert ready.release == {"simple2-0-pcb": ("simple2-0-pcb-0", "simple2-0-pcb-1")}
    assert set(ready.waiting) == {"simple2-0-pcd"}  # pcd still waits for pcb and pcc


def test_a_waiting_pod_gets_the_init_container_and_annotations_and_a_first_clique_does_not() -> None:
    pcs = pcs_of(SIMPLE2)
    plan = plan_replica(pcs, 0)
    pod = manifests.pod_manifest(pcs, plan, "simple2-0-pcd", 0)
    annotations = pod["metadata"]["annotations"]
    assert annotations[names.ANNOTATION_STARTUP] == names.STARTUP_WAITING
    assert annotations[names.ANNOTATION_STARTS_AFTER] == "simple2-0-pcb,simple2-0-pcc"
    init = pod["spec"]["initContainers"][0]
    assert init["name"] == names.STARTUP_WAIT_CONTAINER and init["image"] == names.DEFAULT_STARTUP_WAIT_IMAGE
    assert f'{names.ANNOTATION_STARTUP}="{names.STARTUP_RELEASED}"' in init["command"][-1]
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == names.STARTUP_PODINFO_VOLUME)
    assert volume["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"] == "metadata.annotations"
    first = manifests.pod_manifest(pcs, plan, "simple2-0-pca", 0)
    assert "initContainers" not in first["spec"] and names.ANNOTATION_STARTUP not in (
        first["metadata"].get("annotations") or {})


# --- autoscaling ---------------------------------------------------------------------------------------------------
def test_simple3_gets_one_hpa_per_autoscaled_podclique_and_scaling_group_named_after_its_target() -> None:
    pcs = pcs_of(SIMPLE3)
    owner = manifests.owner_reference(names.GROVE_API_VERSION, names.KIND_PODCLIQUESET, "simple3", "uid-1")
    hpas = {h["metadata"]["name"]: h for h in hpa_manifests(pcs, plan_replica(pcs, 0), owner=owner)}
    assert set(hpas) == {"simple3-0-pca", "simple3-0-sga"}
    pca, sga = hpas["simple3-0-pca"], hpas["simple3-0-sga"]
    assert pca["apiVersion"] == "autoscaling/v2" and pca["kind"] == "HorizontalPodAutoscaler"
    assert pca["spec"]["scaleTargetRef"] == {"apiVersion": "grove.io/v1alpha1", "kind": "PodClique",
                                             "name": "simple3-0-pca"}
    assert (pca["spec"]["minReplicas"], pca["spec"]["maxReplicas"]) == (3, 5)  # minReplicas defaults to replicas
    assert sga["spec"]["scaleTargetRef"]["kind"] == "PodCliqueScalingGroup"
    assert (sga["spec"]["minReplicas"], sga["spec"]["maxReplicas"]) == (3, 6)
    assert sga["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"] == 80
    assert pca["metadata"]["ownerReferences"] == [owner]
    assert pca["metadata"]["labels"][names.LABEL_COMPONENT] == "pcs-hpa"
    assert not hpa_differs(copy.deepcopy(pca), pca)
    changed = copy.deepcopy(pca)
    changed["spec"]["maxReplicas"] = 9
    assert hpa_differs(changed, pca)


def test_autoscaling_rules_name_the_field() -> None:
    data = copy.deepcopy(SIMPLE3)
    template = data["spec"]["template"]
    template["cliques"][1]["spec"]["autoScalingConfig"] = {"maxReplicas": 4}  # pcb is in scaling group sga
    template["cliques"][0]["spec"]["autoScalingConfig"] = {"minReplicas": 2, "maxReplicas": 1}
    template["podCliqueScalingGroups"][0]["scaleConfig"] = {"minReplicas": 1, "maxReplicas": 6}
    text = [str(p) for p in validate_pcs(data)]
    assert any(t.startswith("spec.template.cliques[1].spec.autoScalingConfig: not allowed on a clique of a "
                            "scaling group") for t in text), text
    assert any(t.startswith("spec.template.cliques[0].spec.autoScalingConfig.minReplicas: must be at least "
                            "spec.minAvailable (3)") for t in text), text
    assert any(t.startswith("spec.template.cliques[0].spec.autoScalingConfig.maxReplicas") for t in text), text
    assert any(t.startswith("spec.template.podCliqueScalingGroups[0].scaleConfig.minReplicas: must be at least "
                            "minAvailable (2)") for t in text), text
    del template["podCliqueScalingGroups"][0]["scaleConfig"]["maxReplicas"]
    assert "spec.template.podCliqueScalingGroups[0].scaleConfig.maxReplicas" in paths(validate_pcs(data))


# --- fields not implemented ------------------------------------------------------------------------------------------
def test_grove_fields_not_implemented_are_warned_with_their_paths() -> None:
    data = copy.deepcopy(SIMPLE3)
    template = data["spec"]["template"]
    data["spec"]["updateStrategy"] = {"type": "RollingRecreate"}  # implemented (grove.rollout): no warning
    template["topologyConstraint"] = {"pack": {"required": "rack"}}
    template["resourceClaimTemplates"] = [{"name": "gpu", "templateSpec": {}}]
    template["cliques"][0]["resourceSharing"] = [{"name": "gpu", "scope": "PerReplica"}]
    template["podCliqueScalingGroups"][0]["topologyConstraint"] = {"pack": {"required": "host"}}
    template["cliques"][0]["spec"]["startsAftr"] = ["pcb"]  # a typo: an unknown field
    problems, warnings = check_document(data)
    assert problems == []
    assert sorted(paths(warnings)) == sorted([
        "spec.template.topologyConstraint", "spec.template.resourceClaimTemplates",
        "spec.template.cliques[0].resourceSharing", "spec.template.podCliqueScalingGroups[0].topologyConstraint",
        "spec.template.cliques[0].spec.startsAftr"])
    assert all("not implemented" in w.message or "unknown field" in w.message for w in warnings)


# --- counts owned by the objects -------------------------------------------------------------------------------------
def test_stored_counts_win_over_the_template_and_scaling_up_adds_scaled_gangs() -> None:
    pcs = pcs_of(SIMPLE3)
    fresh = plan_replica(pcs, 0)
    assert fresh.scaling_group("simple3-0-sga").replicas == 3 and len(fresh.scaled_gangs) == 1
    scaled = plan_replica(pcs, 0, ObservedCounts(scaling_groups={"simple3-0-sga": 5},
                                                 pod_cliques={"simple3-0-pca": 4, "simple3-0-sga-0-pcb": 3}))
    assert scaled.scaling_group("simple3-0-sga").replicas == 5
    assert [g.name for g in scaled.scaled_gangs] == ["simple3-0-sga-0", "simple3-0-sga-1", "simple3-0-sga-2"]
    assert scaled.pod_gang("simple3-0-sga-2").scaling_group.replica_index == 4  # type: ignore[union-attr]
    assert scaled.pod_clique("simple3-0-pca").replicas == 4
    assert scaled.pod_clique("simple3-0-sga-0-pcb").replicas == 3
    assert scaled.pod_clique("simple3-0-sga-4-pcb").replicas == 2  # new replicas: seeded by the template
    down = plan_replica(pcs, 0, ObservedCounts(scaling_groups={"simple3-0-sga": 2}))
    assert down.scaled_gangs == () and not any("-sga-2-" in p.name for p in down.pod_cliques)


def test_counts_below_min_available_are_clamped_and_reported() -> None:
    pcs = pcs_of(SIMPLE3)
    counts = ObservedCounts(scaling_groups={"simple3-0-sga": 1}, pod_cliques={"simple3-0-pca": 0})
    plan = plan_replica(pcs, 0, counts)
    assert plan.scaling_group("simple3-0-sga").replicas == 2 and plan.pod_clique("simple3-0-pca").replicas == 3
    planned = {"simple3-0-sga": 2, "simple3-0-pca": 3}
    assert clamped(counts, planned) == [
        "PodCliqueScalingGroup simple3-0-sga: spec.replicas 1 is below its minAvailable; kept at 2",
        "PodClique simple3-0-pca: spec.replicas 0 is below its minAvailable; kept at 3"]


def test_observed_counts_skip_terminating_objects_and_garbled_counts() -> None:
    objects = [
        {"metadata": {"name": "a"}, "spec": {"replicas": 4}},
        {"metadata": {"name": "b", "deletionTimestamp": "2026-01-01T00:00:00Z"}, "spec": {"replicas": 9}},
        {"metadata": {"name": "c"}, "spec": {"replicas": "7"}},
        {"metadata": {"name": "d"}, "spec": {"replicas": True}},
    ]
    assert observed_counts(objects, []).scaling_groups == {"a": 4}


def test_selectors_select_the_pods_of_the_object() -> None:
    plan = plan_replica(pcs_of(SIMPLE3), 0)
    pod = plan.pod("simple3-0-sga-1-pcd", 0)
    for selector in (podclique_selector("simple3", "simple3-0-sga-1-pcd"),
                     scaling_group_selector("simple3", "simple3-0-sga")):
        wanted = dict(pair.split("=", 1) for pair in selector.split(","))
        assert wanted.items() <= pod.labels.items(), (selector, pod.labels)
    other = plan.pod("simple3-0-pca", 0)
    assert not dict(pair.split("=", 1) for pair in scaling_group_selector("simple3", "simple3-0-sga").split(
        ",")).items() <= other.labels.items()


# --- the name limit on scale-up (63 characters: pod names are hostnames, PodClique names are label values) --------
LONG = "p" * 47  # `<LONG>-0-sg-9-worker-1` is 63 characters: 10 scaling group replicas fit, 11 do not


def long_named() -> PodCliqueSet:
    return pcs_of({
        "apiVersion": names.GROVE_API_VERSION, "kind": names.KIND_PODCLIQUESET,
        "metadata": {"name": LONG, "namespace": "default"},
        "spec": {"replicas": 1, "template": {
            "cliques": [{"name": c, "spec": {"replicas": 2, "minAvailable": 1, "podSpec": {
                "containers": [{"name": "c", "image": "busybox"}]}}} for c in ("leader", "worker")],
            "podCliqueScalingGroups": [{"name": "sg", "replicas": 3, "minAvailable": 2,
                                         "cliqueNames": ["leader", "worker"]}]}},
    })


def test_name_limit_arithmetic() -> None:
    assert most_indices("a" * 61) == 10  # `a...a-9` is 63
    assert most_indices("a" * 60) == 100
    assert most_indices("a" * 62) == 0
    assert most_pods("x" * 59) == 1000
    assert most_scaling_group_replicas(f"{LONG}-0-sg", {"leader": 2, "worker": 2}) == 10
    assert most_scaling_group_replicas(f"{LONG}-0-sg", {"leader": 2, "worker": 12}) == 0  # `worker-11`: no digit left


def test_a_template_within_the_limit_validates_and_plans_unchanged() -> None:
    pcs = long_named()
    assert validate_pcs(pcs) == []
    plan = plan_replica(pcs, 0)
    assert plan.scaling_group(f"{LONG}-0-sg").replicas == 3
    assert max(len(names.pod_name(p.name, p.replicas - 1)) for p in plan.pod_cliques) <= names.MAX_NAME_LENGTH


def test_a_scale_write_over_the_name_limit_is_clamped_whole_and_reported() -> None:
    pcs = long_named()
    pcsg, leader = f"{LONG}-0-sg", f"{LONG}-0-sg-0-leader"
    counts = ObservedCounts(scaling_groups={pcsg: 12}, pod_cliques={leader: 150})
    plan = plan_replica(pcs, 0, counts)
    assert plan.scaling_group(pcsg).replicas == 10
    # Never half-created: every planned PodClique and pod name fits, and the last replica that fits is whole.
    assert {p.name for p in plan.pod_cliques if p.name.startswith(f"{pcsg}-9-")} == {
        f"{pcsg}-9-leader", f"{pcsg}-9-worker"}
    assert not any(p.name.startswith(f"{pcsg}-10-") for p in plan.pod_cliques)
    assert all(len(p.name) <= names.MAX_NAME_LENGTH for p in plan.pod_cliques)
    assert all(len(names.pod_name(p.name, p.replicas - 1)) <= names.MAX_NAME_LENGTH for p in plan.pod_cliques)
    assert plan.pod_clique(leader).replicas == 10  # `<leader>-9` is 63 characters
    assert [g.name for g in plan.scaled_gangs] == [f"{pcsg}-{k}" for k in range(8)]
    planned = {pcsg: 10, leader: 10}
    assert clamped(counts, planned) == [
        f"PodCliqueScalingGroup {pcsg}: spec.replicas 12 would generate names over 63 characters "
        f"(index 10 and up: {pcsg}-10...); kept at 10",
        f"PodClique {leader}: spec.replicas 150 would generate names over 63 characters "
        f"(index 10 and up: {leader}-10...); kept at 10"]


def test_the_name_limit_never_lowers_a_count_below_min_available_nor_touches_counts_that_fit() -> None:
    pcs = long_named()
    pcsg = f"{LONG}-0-sg"
    plan = plan_replica(pcs, 0, ObservedCounts(scaling_groups={pcsg: 10}))
    assert plan.scaling_group(pcsg).replicas == 10
    assert clamped(ObservedCounts(scaling_groups={pcsg: 10}), {pcsg: 10}) == []
    assert ObservedCounts(scaling_groups={"x": 5}).scaling_group("x", 3, 2, most=1) == 2
