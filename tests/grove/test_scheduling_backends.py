"""Scheduler backends (grove.scheduling): the choice per PCS and the mapping of PodGangs onto native PodGroups."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from grove import names
from grove.manifests import pod_manifest
from grove.models import PodCliqueSet
from grove.plan import plan_replica
from grove.scheduling import (
    chosen_backend,
    gang_scheduled,
    held_surplus_pods,
    is_required,
    native_gangs,
    native_podgroup_manifest,
    place_pod,
    scheduling_group_of,
)
from grove.validation import validate_pcs

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _load(name: str, annotations: dict[str, str] | None = None) -> PodCliqueSet:
    data = yaml.safe_load((EXAMPLES / name).read_text())
    if annotations is not None:
        data["metadata"]["annotations"] = annotations
    return PodCliqueSet.model_validate(data)


STANDALONE = _load("standalone.yaml")  # frontend 2 (min 1), api 3 (min 2): surplus pods exist
PREFILL = _load("prefill-scaling.yaml")  # leader 1 + worker 2 per PCSG replica, replicas 5, minAvailable 3


@pytest.mark.parametrize("value", names.BACKEND_VALUES)
def test_annotation_overrides_the_worker_default(value: str) -> None:
    pcs = _load("standalone.yaml", {names.ANNOTATION_SCHEDULER_BACKEND: value})
    assert validate_pcs(pcs) == []
    assert chosen_backend(pcs, names.BACKEND_NONE if value != names.BACKEND_NONE else names.BACKEND_KUBE) == value


def test_without_annotation_the_worker_default_applies() -> None:
    assert chosen_backend(STANDALONE, names.BACKEND_KUBE) == names.BACKEND_KUBE
    assert chosen_backend(STANDALONE, names.BACKEND_NONE) == names.BACKEND_NONE


def test_unknown_backend_is_a_problem_naming_the_annotation() -> None:
    pcs = _load("standalone.yaml", {names.ANNOTATION_SCHEDULER_BACKEND: "volcano"})
    problems = [str(p) for p in validate_pcs(pcs)]
    assert problems == [
        "metadata.annotations[grove-temporal.io/scheduler-backend]: must be kube, kai, none, got 'volcano'"
    ]


def test_one_native_gang_per_podgang_with_the_required_pods_only() -> None:
    plan = plan_replica(STANDALONE, 0)
    (gang,) = native_gangs(plan)
    assert gang.pod_gang == "web-0"
    # minCount is the sum of the podgroups' minReplicas, and the group holds exactly that many pods
    assert gang.min_count == sum(g.min_replicas for g in plan.base_gang.pod_groups) == 1 + 2
    assert gang.members == ("web-0-frontend-0", "web-0-api-0", "web-0-api-1")
    assert is_required(plan, "web-0-api", 1) and not is_required(plan, "web-0-api", 2)
    assert not is_required(plan, "web-0-frontend", 1)


def test_base_and_scaled_gangs_each_get_one_native_gang() -> None:
    plan = plan_replica(PREFILL, 0)
    gangs = {g.pod_gang: g for g in native_gangs(plan)}
    assert list(gangs) == ["my-pcs-0", "my-pcs-0-prefill-0", "my-pcs-0-prefill-1"]
    assert gangs["my-pcs-0"].min_count == 3 * (1 + 2)  # PCSG replicas 0-2, leader 1 + worker 2 each
    assert gangs["my-pcs-0-prefill-1"].members == (
        "my-pcs-0-prefill-4-leader-0", "my-pcs-0-prefill-4-worker-0", "my-pcs-0-prefill-4-worker-1")
    assert gangs["my-pcs-0-prefill-1"].labels[names.LABEL_PODGANG] == "my-pcs-0-prefill-1"


def test_native_podgroup_is_owned_by_its_podgang_incarnation() -> None:
    plan = plan_replica(PREFILL, 0)
    gang = native_gangs(plan)[1]
    body = native_podgroup_manifest(gang, "ns", "0a1b2c3d-4e5f-6789-abcd-ef0123456789")
    assert body["apiVersion"] == "scheduling.k8s.io/v1alpha2" and body["kind"] == "PodGroup"
    assert body["metadata"]["name"] == "my-pcs-0-prefill-0-0a1b2c3d"
    assert body["metadata"]["namespace"] == "ns"
    assert body["spec"] == {"schedulingPolicy": {"gang": {"minCount": 3}}}
    (owner,) = body["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "PodGang", "my-pcs-0-prefill-0", "0a1b2c3d-4e5f-6789-abcd-ef0123456789", True)
    labels = body["metadata"]["labels"]
    assert labels[names.LABEL_MANAGED_BY] == names.MANAGED_BY
    assert labels[names.LABEL_PCS_REPLICA_INDEX] == "0"
    assert labels[names.LABEL_COMPONENT] == names.COMPONENT_NATIVE_PODGROUP
    assert names.LABEL_NAME not in labels  # the name may be longer than a label value may be


def test_longest_gang_name_still_makes_a_valid_podgroup_name() -> None:
    gang = "p" * 63
    name = names.native_podgroup_name(gang, "0a1b2c3d-4e5f-6789-abcd-ef0123456789")
    assert len(name) == 72 and name.startswith(gang)  # a DNS subdomain (<= 253), as PodGroup names are


def test_a_recreated_podgang_gets_a_podgroup_of_its_own() -> None:
    assert names.native_podgroup_name("p-0", "aaaaaaaa-1") != names.native_podgroup_name("p-0", "bbbbbbbb-1")
    assert names.native_podgroup_name("p-0", "aaaaaaaa-1") == names.native_podgroup_name("p-0", "aaaaaaaa-1")


def test_gang_scheduled_needs_every_podgroup_at_its_minimum() -> None:
    plan = plan_replica(STANDALONE, 0)
    gang = plan.base_gang
    assert not gang_scheduled(gang, {})
    assert not gang_scheduled(gang, {"web-0-frontend": 2, "web-0-api": 1})
    assert gang_scheduled(gang, {"web-0-frontend": 1, "web-0-api": 2})


def test_place_pod_per_backend_and_the_template_untouched() -> None:
    plan = plan_replica(STANDALONE, 0)
    body = pod_manifest(STANDALONE, plan, "web-0-api", 0)
    kube = place_pod(body, names.BACKEND_KUBE, "web-0-0a1b2c3d")
    assert kube["spec"]["schedulingGroup"] == {"podGroupName": "web-0-0a1b2c3d"}
    assert scheduling_group_of(kube) == "web-0-0a1b2c3d"
    assert "schedulingGroup" not in body["spec"] and scheduling_group_of(body) is None
    assert "schedulingGroup" not in place_pod(body, names.BACKEND_KUBE, None)["spec"]  # a surplus pod
    assert kube["spec"]["schedulingGates"] == body["spec"]["schedulingGates"]  # the gates stay in every backend
    kai = place_pod(body, names.BACKEND_KAI)
    assert kai["spec"]["schedulerName"] == names.KAI_SCHEDULER_NAME and "schedulingGroup" not in kai["spec"]
    assert place_pod(body, names.BACKEND_NONE) == body


def test_kai_keeps_a_scheduler_name_the_user_wrote() -> None:
    plan = plan_replica(STANDALONE, 0)
    body = pod_manifest(STANDALONE, plan, "web-0-api", 0)
    body["spec"]["schedulerName"] = "my-scheduler"
    assert place_pod(body, names.BACKEND_KAI)["spec"]["schedulerName"] == "my-scheduler"


def test_surplus_pods_wait_for_their_gang_to_be_scheduled() -> None:
    plan = plan_replica(STANDALONE, 0)  # frontend 2 (min 1), api 3 (min 2)
    assert held_surplus_pods(plan, {}) == {"web-0-frontend-1", "web-0-api-2"}
    assert held_surplus_pods(plan, {"web-0-frontend": 1, "web-0-api": 1}) == {"web-0-frontend-1", "web-0-api-2"}
    assert held_surplus_pods(plan, {"web-0-frontend": 1, "web-0-api": 2}) == frozenset()


def test_no_surplus_when_min_available_is_replicas() -> None:
    plan = plan_replica(PREFILL, 0)
    assert held_surplus_pods(plan, {}) == frozenset()
