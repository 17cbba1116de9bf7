"""The wire models: Grove manifests parse unchanged, field names are Grove's, round trips are lossless."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from grove.models import (
    KaiPodGroup,
    PodClique,
    PodCliqueScalingGroup,
    PodCliqueSet,
    PodGang,
)
from grove.models.podcliqueset import PodCliqueSetSpec, wanted_replicas

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

# A Grove-style manifest using fields we model only as passthrough and fields we do not model at all.
GROVE_MANIFEST: dict[str, Any] = yaml.safe_load(
    """
apiVersion: grove.io/v1alpha1
kind: PodCliqueSet
metadata:
  name: disagg
  namespace: serving
  labels: {team: inference}
spec:
  replicas: 2
  updateStrategy: {type: RollingRecreate}
  template:
    cliqueStartupType: CliqueStartupTypeExplicit
    priorityClassName: high
    headlessServiceConfig: {publishNotReadyAddresses: true}
    topologyConstraint: {pack: {required: zone}}
    terminationDelay: 1h30m
    resourceClaimTemplates:
      - name: gpus
        templateSpec: {spec: {devices: {requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}]}}}
    cliques:
      - name: frontend
        labels: {tier: fe}
        annotations: {note: x}
        topologyConstraint: {pack: {preferred: host}}
        rollingUpdate: {maxUnavailable: 1}
        spec:
          roleName: frontend
          replicas: 2
          minAvailable: 1
          startsAfter: [decode-leader]
          autoScalingConfig: {maxReplicas: 4}
          podSpec:
            containers:
              - name: main
                image: registry.k8s.io/pause:3.10
                resources: {requests: {cpu: 10m}}
      - name: decode-leader
        spec:
          roleName: leader
          replicas: 1
          podSpec: {containers: [{name: main, image: registry.k8s.io/pause:3.10}]}
    podCliqueScalingGroups:
      - name: decode
        cliqueNames: [decode-leader]
        replicas: 3
        minAvailable: 2
        terminationDelay: 30m
        scaleConfig: {maxReplicas: 6}
        resourceSharing: [{name: gpus, scope: PerReplica}]
status:
  replicas: 2
  availableReplicas: 1
  updatedReplicas: 2
  hpaPodSelector: app=disagg
  conditions:
    - {type: SpecValid, status: "True", reason: Valid, lastTransitionTime: "2025-01-02T03:04:05Z"}
"""
)


def test_grove_manifest_parses_with_snake_case_access() -> None:
    pcs = PodCliqueSet.model_validate(GROVE_MANIFEST)
    template = pcs.spec.template
    assert pcs.metadata.namespace == "serving"
    assert template.termination_delay == timedelta(hours=1, minutes=30)
    assert template.clique_startup_type == "CliqueStartupTypeExplicit"
    assert template.cliques[0].spec.min_available == 1
    assert template.cliques[0].spec.pod_spec["containers"][0]["name"] == "main"
    assert template.pod_clique_scaling_groups[0].clique_names == ["decode-leader"]
    assert template.pod_clique_scaling_groups[0].termination_delay == timedelta(minutes=30)
    assert pcs.status is not None and pcs.status.available_replicas == 1


def test_round_trip_is_lossless_including_unmodelled_fields() -> None:
    pcs = PodCliqueSet.model_validate(GROVE_MANIFEST)
    wire = pcs.to_wire(exclude_unset=True)
    # Everything comes back as written, except the timestamp, which comes back in RFC 3339 form.
    assert yaml.safe_load(yaml.safe_dump(wire)) == _normalise_timestamps(GROVE_MANIFEST)
    assert wire["spec"]["template"]["resourceClaimTemplates"][0]["name"] == "gpus"
    assert wire["spec"]["template"]["cliques"][0]["rollingUpdate"] == {"maxUnavailable": 1}


def _normalise_timestamps(data: dict[str, Any]) -> dict[str, Any]:
    copied = yaml.safe_load(yaml.safe_dump(data))
    copied["status"]["conditions"][0]["lastTransitionTime"] = "2025-01-02T03:04:05Z"
    return copied


def test_python_names_populate_and_serialise_to_camel_case() -> None:
    pcs = PodCliqueSet.model_validate(
        {
            "metadata": {"name": "p"},
            "spec": {
                "template": {
                    "cliques": [{"name": "a", "spec": {"replicas": 2, "min_available": 1}}],
                    "termination_delay": timedelta(hours=4),
                }
            },
        }
    )
    wire = pcs.to_wire()
    assert wire["apiVersion"] == "grove.io/v1alpha1" and wire["kind"] == "PodCliqueSet"
    assert wire["spec"]["template"]["cliques"][0]["spec"]["minAvailable"] == 1
    assert wire["spec"]["template"]["terminationDelay"] == "4h"
    assert "min_available" not in str(wire)


def test_python_dump_keeps_timedelta() -> None:
    pcs = PodCliqueSet.model_validate(GROVE_MANIFEST)
    assert pcs.model_dump(by_alias=False)["spec"]["template"]["termination_delay"] == timedelta(
        hours=1, minutes=30
    )


@pytest.mark.parametrize(
    ("path", "value", "loc"),
    [
        (("spec", "replicas"), "3", ("spec", "replicas")),
        (("spec", "template", "terminationDelay"), "four hours", ("spec", "template", "terminationDelay")),
        (("spec", "template", "terminationDelay"), 14400, ("spec", "template", "terminationDelay")),
        (("spec", "template", "cliques"), {"name": "x"}, ("spec", "template", "cliques")),
        (("kind",), "Deployment", ("kind",)),
    ],
)
def test_malformed_fields_are_rejected_at_their_wire_path(
    path: tuple[str, ...], value: Any, loc: tuple[str, ...]
) -> None:
    data = yaml.safe_load(yaml.safe_dump(GROVE_MANIFEST))
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(ValidationError) as error:
        PodCliqueSet.model_validate(data)
    assert tuple(error.value.errors()[0]["loc"][: len(loc)]) == loc


def test_status_types_of_every_kind() -> None:
    pclq = PodClique.model_validate(
        {
            "metadata": {"name": "p-0-a"},
            "spec": {"replicas": 3, "minAvailable": 2, "podSpec": {}},
            "status": {
                "replicas": 3,
                "readyReplicas": 2,
                "scheduledReplicas": 3,
                "scheduleGatedReplicas": 0,
                "conditions": [
                    {"type": "MinAvailableBreached", "status": "False", "reason": "SufficientReadyPods"}
                ],
            },
        }
    )
    assert pclq.status is not None and pclq.status.schedule_gated_replicas == 0
    pcsg = PodCliqueScalingGroup.model_validate(
        {
            "metadata": {"name": "p-0-sg"},
            "spec": {"replicas": 4, "minAvailable": 3, "cliqueNames": ["a"], "terminationDelay": "2h"},
            "status": {"replicas": 4, "scheduledReplicas": 4, "availableReplicas": 3},
        }
    )
    assert pcsg.spec.termination_delay == timedelta(hours=2)
    assert pcsg.status is not None and pcsg.status.available_replicas == 3


def test_podgang_uses_groves_lower_case_podgroups_field() -> None:
    gang = PodGang.model_validate(
        {
            "apiVersion": "scheduler.grove.io/v1alpha1",
            "kind": "PodGang",
            "metadata": {"name": "p-0"},
            "spec": {
                "podgroups": [
                    {
                        "name": "p-0-a",
                        "podReferences": [{"namespace": "ns", "name": "p-0-a-0"}],
                        "minReplicas": 1,
                    }
                ]
            },
        }
    )
    assert gang.spec.pod_groups[0].pod_references[0].name == "p-0-a-0"
    assert gang.to_wire()["spec"]["podgroups"][0]["minReplicas"] == 1


def test_kai_podgroup_models_subgroups_and_passthrough() -> None:
    group = KaiPodGroup.model_validate(
        yaml.safe_load((EXAMPLES / "kai-podgroups.yaml").read_text().split("---")[3])
    )
    assert group.spec.queue == "inference" and group.spec.preemptibility == "semi-preemptible"
    assert group.spec.sub_groups is not None
    prefill = group.spec.sub_groups[0]
    assert (prefill.name, prefill.min_sub_group, prefill.min_member) == ("prefill", 3, None)
    assert prefill.topology_constraint == {"requiredTopologyLevel": "zone"}
    assert group.to_wire(exclude_unset=True)["spec"]["subGroups"][1]["parent"] == "prefill"


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_round_trips(path: Path) -> None:
    for document in yaml.safe_load_all(path.read_text()):
        model = {"PodCliqueSet": PodCliqueSet, "PodGroup": KaiPodGroup}[document["kind"]]
        assert model.model_validate(document).to_wire(exclude_unset=True) == document


@pytest.mark.parametrize(
    ("obj", "wanted"),
    [
        ({"spec": {"replicas": 3, "template": {}}}, 3),
        ({"spec": {"replicas": 0}}, 0),
        ({"spec": {"template": {}}}, 1),  # absent: the model's default, never 0
        ({"spec": {"replicas": None}}, None),
        ({"spec": {"replicas": -1}}, None),
        ({"spec": {"replicas": "2"}}, None),
        ({"spec": {"replicas": True}}, None),
        ({"spec": None}, None),
        ({}, None),
        (None, None),
    ],
)
def test_wanted_replicas_reads_the_stored_count_or_says_it_cannot(obj: dict | None, wanted: int | None) -> None:
    assert wanted_replicas(obj) == wanted


def test_wanted_replicas_default_agrees_with_the_model() -> None:
    spec = {"template": {"cliques": [{"name": "a", "spec": {"replicas": 1, "podSpec": {}}}]}}
    assert PodCliqueSetSpec.model_validate(spec).replicas == wanted_replicas({"spec": spec})
