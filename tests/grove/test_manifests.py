"""Kubernetes objects built from a plan: gated pods from the clique's podSpec, PodGangs, PodCliques, Service."""

from __future__ import annotations

from pathlib import Path

import yaml

from grove import names
from grove.manifests import (
    has_grove_gate,
    owner_reference,
    pod_manifest,
    podclique_manifest,
    podgang_manifest,
    scaling_group_manifest,
    service_manifest,
    without_grove_gate,
)
from grove.models import PodClique, PodCliqueScalingGroup, PodCliqueSet, PodGang
from grove.plan import plan_replica

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
STANDALONE = PodCliqueSet.model_validate(yaml.safe_load((EXAMPLES / "standalone.yaml").read_text()))
INFERENCE = PodCliqueSet.model_validate(yaml.safe_load((EXAMPLES / "gang-termination.yaml").read_text()))


def test_pod_is_gated_named_after_its_hostname_and_carries_identity() -> None:
    plan = plan_replica(STANDALONE, 1)
    owner = owner_reference("grove.io/v1alpha1", "PodClique", "web-1-api", "uid-1")
    pod = pod_manifest(STANDALONE, plan, "web-1-api", 2, owner=owner)
    assert pod["metadata"]["name"] == "web-1-api-2"
    assert pod["metadata"]["namespace"] == "default"
    assert pod["metadata"]["ownerReferences"] == [owner]
    spec = pod["spec"]
    assert (spec["hostname"], spec["subdomain"]) == ("web-1-api-2", "web-1")
    assert spec["schedulingGates"] == [{"name": names.SCHEDULING_GATE}]
    env = spec["containers"][0]["env"]
    assert env[0] == {"name": "LOG_LEVEL", "value": "info"}  # the user's own variables stay first
    assert {e["name"]: e["value"] for e in env[1:]} == plan.pod("web-1-api", 2).env
    assert spec["containers"][0]["image"] == "registry.k8s.io/pause:3.10"


def test_pod_keeps_other_gates_and_does_not_modify_the_template() -> None:
    data = STANDALONE.model_copy(deep=True)
    data.spec.template.cliques[0].spec.pod_spec["schedulingGates"] = [{"name": "example.com/other"}]
    data.spec.template.priority_class_name = "high"
    before = data.model_dump()
    plan = plan_replica(data, 0)
    pod = pod_manifest(data, plan, "web-0-frontend", 0)
    assert pod["spec"]["schedulingGates"] == [{"name": "example.com/other"}, {"name": names.SCHEDULING_GATE}]
    assert pod["spec"]["priorityClassName"] == "high"
    assert data.model_dump() == before
    assert without_grove_gate(pod["spec"]["schedulingGates"]) == [{"name": "example.com/other"}]
    assert has_grove_gate(pod["spec"]["schedulingGates"]) and not has_grove_gate(
        without_grove_gate(pod["spec"]["schedulingGates"])
    )


def test_grove_env_vars_replace_user_variables_of_the_same_name() -> None:
    data = STANDALONE.model_copy(deep=True)
    data.spec.template.cliques[1].spec.pod_spec["containers"][0]["env"].append(
        {"name": "GROVE_PCS_INDEX", "value": "x"}
    )
    pod = pod_manifest(data, plan_replica(data, 1), "web-1-api", 0)
    values = [e["value"] for e in pod["spec"]["containers"][0]["env"] if e["name"] == "GROVE_PCS_INDEX"]
    assert values == ["1"]


def test_podgang_manifest_parses_as_a_podgang_with_live_references() -> None:
    plan = plan_replica(INFERENCE, 0)
    refs = {"inference-0-inference-group-0-worker": ["inference-0-inference-group-0-worker-1"]}
    manifest = podgang_manifest(plan, "inference-0", pod_references=refs)
    gang = PodGang.model_validate(manifest)
    assert [g.name for g in gang.spec.pod_groups] == [pg.name for pg in plan.base_gang.pod_groups]
    worker = gang.spec.pod_groups[1]
    assert [(r.namespace, r.name) for r in worker.pod_references] == [
        ("default", "inference-0-inference-group-0-worker-1")
    ]
    assert gang.spec.pod_groups[0].pod_references == []
    assert manifest["metadata"]["labels"][names.LABEL_COMPONENT] == "podgang"


def test_scaled_podgang_manifest_points_at_its_base() -> None:
    plan = plan_replica(INFERENCE, 0)
    manifest = podgang_manifest(plan, "inference-0-inference-group-0")
    assert manifest["metadata"]["labels"][names.LABEL_BASE_PODGANG] == "inference-0"
    assert [g["name"] for g in manifest["spec"]["podgroups"]] == [
        "inference-0-inference-group-1-leader",
        "inference-0-inference-group-1-worker",
    ]


def test_podclique_and_scaling_group_manifests_parse_and_carry_defaults() -> None:
    plan = plan_replica(INFERENCE, 0)
    pclq = PodClique.model_validate(
        podclique_manifest(INFERENCE, plan, "inference-0-another-group-2-other-clique")
    )
    assert (pclq.spec.replicas, pclq.spec.min_available) == (2, 2)
    assert pclq.metadata.labels is not None and pclq.metadata.labels[names.LABEL_PCSG_REPLICA_INDEX] == "2"
    pcsg = PodCliqueScalingGroup.model_validate(scaling_group_manifest(plan, "inference-0-inference-group"))
    assert (pcsg.spec.replicas, pcsg.spec.min_available, pcsg.spec.clique_names) == (
        2,
        1,
        ["leader", "worker"],
    )
    assert pcsg.spec.termination_delay is not None and pcsg.spec.termination_delay.total_seconds() == 7200


def test_service_is_headless_and_selects_the_replica() -> None:
    service = service_manifest(plan_replica(STANDALONE, 1))
    assert service["metadata"]["name"] == "web-1"
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    pod_labels = plan_replica(STANDALONE, 1).pod("web-1-api", 0).labels
    assert service["spec"]["selector"].items() <= pod_labels.items()
    other_replica = plan_replica(STANDALONE, 0).pod("web-0-api", 0).labels
    assert not service["spec"]["selector"].items() <= other_replica.items()
