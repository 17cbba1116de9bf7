"""The expected objects of a replica: seeds 003 and 004 reproduced exactly, and structural properties."""

from __future__ import annotations

import json
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings

from grove import names
from grove.models import PodCliqueSet
from grove.plan import InvalidPodCliqueSet, plan_document, plan_replica, scaled_release_after, topology_for
from grove.validation import validate_pcs
from tests.grove.strategies import valid_pcs

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example(name: str) -> PodCliqueSet:
    return PodCliqueSet.model_validate(yaml.safe_load((EXAMPLES / name).read_text()))


PREFILL = example("prefill-scaling.yaml")


def test_seed003_base_gang_holds_pcsg_replicas_0_to_2() -> None:
    plan = plan_replica(PREFILL, 0)
    base = plan.base_gang
    assert (base.name, base.base, base.scaling_group) == ("my-pcs-0", True, None)
    assert [group.name for group in base.pod_groups] == [
        "my-pcs-0-prefill-0-leader",
        "my-pcs-0-prefill-0-worker",
        "my-pcs-0-prefill-1-leader",
        "my-pcs-0-prefill-1-worker",
        "my-pcs-0-prefill-2-leader",
        "my-pcs-0-prefill-2-worker",
    ]


def test_seed003_scaled_gangs_hold_replicas_3_and_4_with_0_based_names() -> None:
    plan = plan_replica(PREFILL, 0)
    scaled = [(g.name, g.base, [pg.name for pg in g.pod_groups]) for g in plan.scaled_gangs]
    assert scaled == [
        ("my-pcs-0-prefill-0", False, ["my-pcs-0-prefill-3-leader", "my-pcs-0-prefill-3-worker"]),
        ("my-pcs-0-prefill-1", False, ["my-pcs-0-prefill-4-leader", "my-pcs-0-prefill-4-worker"]),
    ]
    assert [g.scaling_group.replica_index for g in plan.scaled_gangs if g.scaling_group] == [3, 4]


def test_seed003_podgroup_min_replicas_is_the_clique_min_available() -> None:
    plan = plan_replica(PREFILL, 0)
    assert {pg.name.rsplit("-", 1)[1]: pg.min_replicas for pg in plan.base_gang.pod_groups} == {
        "leader": 1,
        "worker": 2,
    }


def test_seed003_standalone_cliques_form_the_base_gang() -> None:
    plan = plan_replica(example("standalone.yaml"), 1)
    assert [(g.name, [pg.name for pg in g.pod_groups]) for g in plan.pod_gangs] == [
        ("web-1", ["web-1-frontend", "web-1-api"])
    ]
    assert [pg.min_replicas for pg in plan.base_gang.pod_groups] == [1, 2]


def test_the_plan_json_has_exactly_the_issue_shape_for_the_seed_example() -> None:
    document = json.loads(json.dumps(plan_document(PREFILL)))
    assert _shape(document) == {
        "podCliqueSet": "my-pcs",
        "namespace": "default",
        "replicas": [
            {
                "index": 0,
                "podCliqueScalingGroups": [{"name": "my-pcs-0-prefill", "replicas": 5, "minAvailable": 3}],
                "podCliques": [
                    {
                        "name": f"my-pcs-0-prefill-{j}-{clique}",
                        "clique": clique,
                        "replicas": 1 if clique == "leader" else 2,
                        "minAvailable": 1 if clique == "leader" else 2,
                        "podGang": "my-pcs-0" if j < 3 else f"my-pcs-0-prefill-{j - 3}",
                        "scalingGroup": {"name": "my-pcs-0-prefill", "replicaIndex": j},
                    }
                    for j in range(5)
                    for clique in ("leader", "worker")
                ],
                "podGangs": [
                    {
                        "name": "my-pcs-0",
                        "base": True,
                        "podGroups": [
                            {
                                "name": f"my-pcs-0-prefill-{j}-{clique}",
                                "minReplicas": 1 if clique == "leader" else 2,
                            }
                            for j in range(3)
                            for clique in ("leader", "worker")
                        ],
                    },
                    *(
                        {
                            "name": f"my-pcs-0-prefill-{k}",
                            "base": False,
                            "podGroups": [
                                {"name": f"my-pcs-0-prefill-{k + 3}-leader", "minReplicas": 1},
                                {"name": f"my-pcs-0-prefill-{k + 3}-worker", "minReplicas": 2},
                            ],
                        }
                        for k in range(2)
                    ),
                ],
            }
        ],
    }


ISSUE_KEYS = {
    "top": {"podCliqueSet", "namespace", "replicas"},
    "replica": {"index", "podCliqueScalingGroups", "podCliques", "podGangs"},
    "pcsg": {"name", "replicas", "minAvailable"},
    "pclq": {"name", "clique", "replicas", "minAvailable", "podGang", "scalingGroup"},
    "gang": {"name", "base", "podGroups"},
    "podgroup": {"name", "minReplicas"},
}


def _pick(item: dict[str, Any], keys: set[str]) -> dict[str, Any]:
    missing = keys - item.keys()
    assert not missing, f"missing keys {missing}"
    return {key: item[key] for key in item if key in keys}


def _shape(document: dict[str, Any]) -> dict[str, Any]:
    """The document reduced to the keys the issue specifies (extras are allowed, and documented)."""
    top = _pick(document, ISSUE_KEYS["top"])
    top["replicas"] = [
        {
            **_pick(replica, ISSUE_KEYS["replica"]),
            "podCliqueScalingGroups": [
                _pick(g, ISSUE_KEYS["pcsg"]) for g in replica["podCliqueScalingGroups"]
            ],
            "podCliques": [_pick(p, ISSUE_KEYS["pclq"]) for p in replica["podCliques"]],
            "podGangs": [
                {
                    **_pick(g, ISSUE_KEYS["gang"]),
                    "podGroups": [_pick(pg, ISSUE_KEYS["podgroup"]) for pg in g["podGroups"]],
                }
                for g in replica["podGangs"]
            ],
        }
        for replica in document["replicas"]
    ]
    return top


def test_plan_document_types() -> None:
    document = plan_document(example("gang-termination.yaml"))
    replica = document["replicas"][0]
    standalone = [p for p in replica["podCliques"] if p["scalingGroup"] is None]
    assert standalone == []  # every clique of the seed 002 example is in a scaling group
    assert document["terminationDelay"] == "4h"
    assert [g["terminationDelay"] for g in replica["podCliqueScalingGroups"]] == ["2h", "4h"]
    assert isinstance(replica["podGangs"][0]["base"], bool)


def test_gang_membership_lookups() -> None:
    plan = plan_replica(PREFILL, 0)
    assert plan.gang_of("my-pcs-0-prefill-4-worker").name == "my-pcs-0-prefill-1"
    assert plan.is_base("my-pcs-0-prefill-2-leader") is True
    assert plan.is_base("my-pcs-0-prefill-3-leader") is False
    assert [p.name for p in plan.members("my-pcs-0-prefill", 3)] == [
        "my-pcs-0-prefill-3-leader",
        "my-pcs-0-prefill-3-worker",
    ]
    with pytest.raises(KeyError, match="no PodClique named 'nope'"):
        plan.pod_clique("nope")


def test_pod_identity_labels_and_env() -> None:
    plan = plan_replica(PREFILL, 0)
    pod = plan.pod("my-pcs-0-prefill-3-worker", 1)
    assert (pod.name, pod.hostname, pod.subdomain, pod.pod_gang, pod.base) == (
        "my-pcs-0-prefill-3-worker-1",
        "my-pcs-0-prefill-3-worker-1",
        "my-pcs-0",
        "my-pcs-0-prefill-0",
        False,
    )
    assert pod.labels == {
        names.LABEL_MANAGED_BY: "grove-temporal",
        names.LABEL_PART_OF: "my-pcs",
        names.LABEL_NAME: "my-pcs-0-prefill-3-worker",
        names.LABEL_COMPONENT: "pcsg-podclique",
        names.LABEL_PCS_REPLICA_INDEX: "0",
        names.LABEL_PODGANG: "my-pcs-0-prefill-0",
        names.LABEL_PCSG: "my-pcs-0-prefill",
        names.LABEL_PCSG_REPLICA_INDEX: "3",
        names.LABEL_BASE_PODGANG: "my-pcs-0",
        names.LABEL_PODCLIQUE: "my-pcs-0-prefill-3-worker",
        names.LABEL_POD_INDEX: "1",
        names.LABEL_POD_TEMPLATE_HASH: plan.pod_clique("my-pcs-0-prefill-3-worker").pod_template_hash,
    }
    assert len(pod.labels[names.LABEL_POD_TEMPLATE_HASH]) == 10
    assert pod.env == {
        "GROVE_PCS_NAME": "my-pcs",
        "GROVE_PCS_INDEX": "0",
        "GROVE_PCLQ_NAME": "my-pcs-0-prefill-3-worker",
        "GROVE_HEADLESS_SERVICE": "my-pcs-0.default.svc.cluster.local",
        "GROVE_PCLQ_POD_INDEX": "1",
        "GROVE_PCSG_NAME": "my-pcs-0-prefill",
        "GROVE_PCSG_INDEX": "3",
        "GROVE_PCSG_TEMPLATE_NUM_PODS": "3",
    }
    with pytest.raises(KeyError):
        plan.pod("my-pcs-0-prefill-3-worker", 2)


def test_standalone_pods_have_no_scaling_group_identity_and_keep_user_labels() -> None:
    plan = plan_replica(example("standalone.yaml"), 1)
    pod = plan.pod("web-1-frontend", 0)
    assert pod.labels["tier"] == "frontend"
    assert pod.labels[names.LABEL_COMPONENT] == "pcs-podclique"
    assert names.LABEL_BASE_PODGANG not in pod.labels and names.LABEL_PCSG not in pod.labels
    assert not any(key.startswith("GROVE_PCSG") for key in pod.env)


def test_service_and_topology() -> None:
    plan = plan_replica(example("gang-termination.yaml"), 0)
    assert plan.service.name == "inference-0"
    assert plan.service.selector == {
        names.LABEL_MANAGED_BY: "grove-temporal",
        names.LABEL_PART_OF: "inference",
        names.LABEL_PCS_REPLICA_INDEX: "0",
    }
    topology = topology_for(example("gang-termination.yaml"), 0)
    assert topology.termination_delay == timedelta(hours=4)
    assert topology.effective_delay("inference-0-inference-group") == timedelta(hours=2)
    assert topology.effective_delay("inference-0-another-group") == timedelta(hours=4)
    assert [c.name for c in topology.members("inference-0-another-group", 2)] == [
        "inference-0-another-group-2-other-clique"
    ]


def test_scaled_release_after_annotation() -> None:
    assert plan_replica(PREFILL, 0).scaled_release_after == "Scheduled"
    ready = PREFILL.model_copy(deep=True)
    ready.metadata.annotations = {names.ANNOTATION_SCALED_RELEASE_AFTER: "Ready"}
    assert scaled_release_after(ready) == "Ready"
    assert plan_replica(ready, 0).scaled_release_after == "Ready"


def test_planning_an_invalid_pcs_raises_with_its_problems() -> None:
    broken = PREFILL.model_copy(deep=True)
    broken.spec.template.pod_clique_scaling_groups[0].min_available = 9
    with pytest.raises(InvalidPodCliqueSet) as error:
        plan_replica(broken, 0)
    assert [str(p) for p in error.value.problems] == [
        "spec.template.podCliqueScalingGroups[0].minAvailable: must be between 1 and replicas (5)"
    ]


# --- properties ---------------------------------------------------------------------------------------------
@settings(max_examples=150, deadline=None)
@given(valid_pcs())
def test_every_podclique_is_in_exactly_one_gang_and_gang_of_agrees(data: dict[str, Any]) -> None:
    pcs = PodCliqueSet.model_validate(data)
    assert validate_pcs(pcs) == []
    for replica in range(pcs.spec.replicas):
        plan = plan_replica(pcs, replica)
        membership = Counter(pg.name for gang in plan.pod_gangs for pg in gang.pod_groups)
        assert membership == Counter(p.name for p in plan.pod_cliques)
        for gang in plan.pod_gangs:
            for pg in gang.pod_groups:
                pclq = plan.pod_clique(pg.name)
                assert plan.gang_of(pg.name) == gang
                assert pclq.base == gang.base
                assert pg.min_replicas == pclq.min_available
                assert pg.pod_names == pclq.pod_names


@settings(max_examples=150, deadline=None)
@given(valid_pcs())
def test_base_and_scaled_gangs_follow_min_available(data: dict[str, Any]) -> None:
    pcs = PodCliqueSet.model_validate(data)
    plan = plan_replica(pcs, 0)
    base_members = {pg.name for pg in plan.base_gang.pod_groups}
    for pclq in plan.pod_cliques:
        ref = pclq.scaling_group
        if ref is None:
            assert pclq.name in base_members
            continue
        group = plan.scaling_group(ref.name)
        assert (pclq.name in base_members) == (ref.replica_index < group.min_available)
    for group in plan.scaling_groups:
        scaled = [g for g in plan.scaled_gangs if g.scaling_group and g.scaling_group.name == group.name]
        assert [g.name for g in scaled] == [
            f"{group.name}-{k}" for k in range(group.replicas - group.min_available)
        ]
        for k, gang in enumerate(scaled):
            j = group.min_available + k
            assert [pg.name for pg in gang.pod_groups] == [
                f"{group.name}-{j}-{c}" for c in group.clique_names
            ]
            assert gang.labels[names.LABEL_BASE_PODGANG] == plan.base_gang.name


@settings(max_examples=100, deadline=None)
@given(valid_pcs())
def test_names_are_unique_short_and_the_plan_is_deterministic(data: dict[str, Any]) -> None:
    pcs = PodCliqueSet.model_validate(data)
    for replica in range(pcs.spec.replicas):
        plan = plan_replica(pcs, replica)
        assert plan == plan_replica(PodCliqueSet.model_validate(data), replica)
        pods = plan.pods()
        assert len(pods) == sum(p.replicas for p in plan.pod_cliques)
        for kind in (plan.pod_cliques, plan.scaling_groups, plan.pod_gangs, pods):
            object_names = [item.name for item in kind]
            assert len(set(object_names)) == len(object_names)
            assert all(len(name) <= names.MAX_NAME_LENGTH for name in object_names)
        assert all(pod.labels[names.LABEL_PCS_REPLICA_INDEX] == str(replica) for pod in pods)


@settings(max_examples=100, deadline=None)
@given(valid_pcs())
def test_topology_matches_the_plan(data: dict[str, Any]) -> None:
    pcs = PodCliqueSet.model_validate(data)
    plan = plan_replica(pcs, 0)
    topology = plan.topology()
    assert [c.name for c in topology.cliques] == [p.name for p in plan.pod_cliques]
    assert [c.name for c in topology.standalone()] == [p.name for p in plan.standalone()]
    for group in plan.scaling_groups:
        unit = topology.scaling_group(group.name)
        assert (unit.replicas, unit.min_available) == (group.replicas, group.min_available)
        for j in range(group.replicas):
            assert [c.name for c in topology.members(group.name, j)] == [
                p.name for p in plan.members(group.name, j)
            ]


def test_the_gangs_of_a_termination_follow_the_plan() -> None:
    """A PCS replica termination takes every gang of the plan; a scaling group replica takes its own scaled gang
    only (or none, for a replica inside the base gang)."""
    from grove.release import gangs_of_termination

    plan = plan_replica(PREFILL, 0)
    topology = plan.topology()
    every = gangs_of_termination(topology, (), whole_replica=True)
    assert set(every) == {g.name for g in plan.pod_gangs}
    for gang in plan.scaled_gangs:
        members = tuple(p.name for p in plan.pod_cliques if p.pod_gang == gang.name)
        assert gangs_of_termination(topology, members, whole_replica=False) == (gang.name,)
    base_grouped = tuple(p.name for p in plan.pod_cliques if p.base and p.scaling_group is not None)
    assert base_grouped and gangs_of_termination(topology, base_grouped, whole_replica=False) == ()
