"""The generated CRDs on a real kube-apiserver: Grove-style manifests are stored unchanged, structurally wrong ones
are rejected, and the objects the planner builds are accepted."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import ApiClient, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from grove import manifests, names
from grove.crds import RESOURCES
from grove.models import PodClique, PodCliqueSet
from grove.plan import plan_replica

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GROVE = (names.GROVE_GROUP, names.GROVE_VERSION)


def example(name: str) -> dict[str, Any]:
    return yaml.safe_load((EXAMPLES / name).read_text())


def create_pcs(api: CustomObjectsApi, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    return api.create_namespaced_custom_object(*GROVE, namespace, "podcliquesets", body)


def test_every_generated_crd_is_established(crds: list[str]) -> None:
    assert {f"{r.plural}.{r.group}" for r in RESOURCES} <= set(crds)


def test_short_names_are_served(kube: ApiClient, crds: list[str]) -> None:
    served = {}
    for group, version in (GROVE, (names.SCHEDULER_GROUP, names.SCHEDULER_VERSION)):
        for resource in CustomObjectsApi(kube).get_api_resources(group, version).resources:
            if "/" not in resource.name:  # skip the status and scale subresources
                served[resource.kind] = resource.short_names
    assert served == {
        "PodCliqueSet": ["pcs"],
        "PodClique": ["pclq"],
        "PodCliqueScalingGroup": ["pcsg"],
        "PodGang": ["pg"],
    }


def test_a_grove_manifest_is_stored_unchanged(kube: ApiClient, crds: list[str], namespace: str) -> None:
    api = CustomObjectsApi(kube)
    body = example("gang-termination.yaml")
    # Fields Grove has and we do not model must survive too.
    body["spec"]["template"]["cliqueStartupType"] = "CliqueStartupTypeAnyOrder"
    body["spec"]["template"]["cliques"][0]["rollingUpdate"] = {"maxUnavailable": 1}
    body["spec"]["updateStrategy"] = {"type": "RollingRecreate"}
    create_pcs(api, namespace, copy.deepcopy(body))
    stored = api.get_namespaced_custom_object(*GROVE, namespace, "podcliquesets", "inference")
    assert stored["spec"] == body["spec"]
    parsed = PodCliqueSet.model_validate(stored)
    assert parsed.to_wire(exclude_unset=True)["spec"] == body["spec"]
    assert parsed.spec.template.termination_delay is not None


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda b: b["spec"].update(replicas="3"), "spec.replicas"),
        (
            lambda b: b["spec"]["template"].update(terminationDelay="four hours"),
            "spec.template.terminationDelay",
        ),
        (lambda b: b["spec"]["template"]["cliques"][0]["spec"].update(minAvailable="all"), "minAvailable"),
        (lambda b: b["spec"]["template"].pop("cliques"), "cliques"),
        (
            lambda b: b["spec"]["template"]["cliques"].append(
                copy.deepcopy(b["spec"]["template"]["cliques"][0])
            ),
            "cliques",
        ),
    ],
)
def test_structurally_wrong_manifests_are_rejected(
    kube: ApiClient, crds: list[str], namespace: str, change: Any, field: str
) -> None:
    body = example("prefill-scaling.yaml")
    change(body)
    with pytest.raises(ApiException) as error:
        create_pcs(CustomObjectsApi(kube), namespace, body)
    assert error.value.status == 422
    assert field in error.value.body


def test_null_termination_delay_means_unset(kube: ApiClient, crds: list[str], namespace: str) -> None:
    # Seed 002: "omit the terminationDelay field or set it to null" disables gang termination.
    api = CustomObjectsApi(kube)
    body = example("prefill-scaling.yaml")
    body["spec"]["template"]["terminationDelay"] = None
    create_pcs(api, namespace, body)
    stored = PodCliqueSet.model_validate(
        api.get_namespaced_custom_object(*GROVE, namespace, "podcliquesets", "my-pcs")
    )
    assert stored.spec.template.termination_delay is None


def test_scale_and_status_subresources(kube: ApiClient, crds: list[str], namespace: str) -> None:
    api = CustomObjectsApi(kube)
    create_pcs(api, namespace, example("standalone.yaml"))
    api.patch_namespaced_custom_object_scale(
        *GROVE, namespace, "podcliquesets", "web", {"spec": {"replicas": 3}}
    )
    assert (
        api.get_namespaced_custom_object(*GROVE, namespace, "podcliquesets", "web")["spec"]["replicas"] == 3
    )
    status = {
        "status": {"replicas": 3, "availableReplicas": 1, "hpaPodSelector": "app.kubernetes.io/part-of=web"}
    }
    api.patch_namespaced_custom_object_status(*GROVE, namespace, "podcliquesets", "web", status)
    scale = api.get_namespaced_custom_object_scale(*GROVE, namespace, "podcliquesets", "web")
    assert (scale["spec"]["replicas"], scale["status"]["replicas"]) == (3, 3)
    assert scale["status"]["selector"] == "app.kubernetes.io/part-of=web"


def test_the_planned_objects_of_a_replica_are_accepted(
    kube: ApiClient, crds: list[str], namespace: str
) -> None:
    api = CustomObjectsApi(kube)
    body = example("prefill-scaling.yaml")
    body["metadata"]["namespace"] = namespace
    pcs = PodCliqueSet.model_validate(body)
    plan = plan_replica(pcs, 0)
    for group in plan.scaling_groups:
        api.create_namespaced_custom_object(
            *GROVE, namespace, "podcliquescalinggroups", manifests.scaling_group_manifest(plan, group.name)
        )
    for pclq in plan.pod_cliques:
        api.create_namespaced_custom_object(
            *GROVE, namespace, "podcliques", manifests.podclique_manifest(pcs, plan, pclq.name)
        )
    for gang in plan.pod_gangs:
        api.create_namespaced_custom_object(
            names.SCHEDULER_GROUP,
            names.SCHEDULER_VERSION,
            namespace,
            "podgangs",
            manifests.podgang_manifest(plan, gang.name),
        )
    selector = f"{names.LABEL_PODGANG}=my-pcs-0-prefill-1"
    listed = api.list_namespaced_custom_object(*GROVE, namespace, "podcliques", label_selector=selector)[
        "items"
    ]
    assert sorted(item["metadata"]["name"] for item in listed) == [
        "my-pcs-0-prefill-4-leader",
        "my-pcs-0-prefill-4-worker",
    ]
    stored = PodClique.model_validate(listed[0])
    status = {
        "status": {"replicas": 1, "readyReplicas": 0, "scheduledReplicas": 0, "scheduleGatedReplicas": 1}
    }
    api.patch_namespaced_custom_object_status(*GROVE, namespace, "podcliques", stored.metadata.name, status)
    back = PodClique.model_validate(
        api.get_namespaced_custom_object(*GROVE, namespace, "podcliques", stored.metadata.name)
    )
    assert back.status is not None and back.status.schedule_gated_replicas == 1
    gangs = api.list_namespaced_custom_object(
        names.SCHEDULER_GROUP, names.SCHEDULER_VERSION, namespace, "podgangs"
    )
    assert sorted(g["metadata"]["name"] for g in gangs["items"]) == [
        "my-pcs-0",
        "my-pcs-0-prefill-0",
        "my-pcs-0-prefill-1",
    ]
