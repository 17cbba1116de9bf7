"""Seed 001's rules for KAI PodGroup trees; every example of seeds 000 and 001 is a case."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from grove.gangtree import non_preemptible_pods, tree_from_podgroup
from grove.models import KaiPodGroup
from grove.validation import validate_document, validate_podgroup

DATA = Path(__file__).parent / "data"


def load(relative: str) -> dict[str, Any]:
    return yaml.safe_load((DATA / relative).read_text())


def problems_of(data: Any) -> list[str]:
    return [str(p) for p in validate_podgroup(data)]


@pytest.mark.parametrize(
    ("name", "non_preemptible"),
    [("valid-leaf-minmember", 24), ("valid-two-level", 10), ("valid-mid-level-minsubgroup", 10)],
)
def test_seed001_valid_examples(name: str, non_preemptible: int) -> None:
    data = load(f"seed001/{name}.yaml")
    assert validate_document(data) == []
    assert non_preemptible_pods(tree_from_podgroup(KaiPodGroup.model_validate(data))) == non_preemptible


SEED001_INVALID = {
    "invalid-both-fields": [
        "spec: minMember and minSubGroup are mutually exclusive; a node with children uses minSubGroup only"
    ],
    "invalid-both-fields-literal": ["spec.subGroups[0]: must be a mapping, got string '...'"],
    "invalid-minsubgroup-on-leaf": [
        "spec.minSubGroup: must be between 1 and the number of direct child SubGroups (1), got 3",
        "spec.subGroups[0].minSubGroup: not allowed on a leaf (SubGroup 'prefill-0' has no child SubGroups); "
        "use minMember",
    ],
    "invalid-minsubgroup-exceeds-children": [
        "spec.minSubGroup: must be between 1 and the number of direct child SubGroups (4), got 5",
        *(
            f"spec.subGroups[{i}].minMember: required on a leaf (SubGroup 'prefill-{i}'): the number of pods it needs"
            for i in range(4)
        ),
    ],
    "invalid-reused-minmember": [
        "spec.minMember: not allowed on a node with child SubGroups; use minSubGroup (number of children)"
    ],
    "invalid-reused-minmember-heterogeneous": [
        "spec.minMember: not allowed on a node with child SubGroups; use minSubGroup (number of children)",
        "spec.subGroups[0].minMember: not allowed on a node with child SubGroups (SubGroup 'decode'); use "
        "minSubGroup (number of "
        "children)",
        "spec.subGroups[3].minMember: not allowed on a node with child SubGroups (SubGroup 'prefill'); use "
        "minSubGroup (number of "
        "children)",
    ],
    "literal-mid-level-minsubgroup": [
        "spec.minSubGroup: must be between 1 and the number of direct child SubGroups (1), got 2"
    ],
    "invalid-structure": [
        "spec.subGroups[1].name: duplicate SubGroup name 'a' (also subGroups[0])",
        "spec.subGroups[2].parent: unknown parent 'nowhere'",
        "spec.subGroups[3].parent: cycle: x -> y -> x",
        "spec.minSubGroup: must be between 1 and the number of direct child SubGroups (2), got 0",
    ],
}


@pytest.mark.parametrize("name", sorted(SEED001_INVALID))
def test_seed001_invalid_examples(name: str) -> None:
    assert problems_of(load(f"seed001/{name}.yaml")) == SEED001_INVALID[name]


# Seed 000's option-2 examples put both fields on inner nodes: invalid under seed 001. Written seed-001 style
# (drop minMember wherever a node has children) they are valid; the non-preemptible count follows the tree.
SEED000_OPTION2 = {
    "option2-inference-service": 24,
    "option2-lws-training": 18,
    "option2-inference-grove": 28,
    "option2-generic": 10,
    "option2-leader-workers": 9,
    "option2-validation-consistent": 24,
    "option2-validation-impossible": 24,
    "option2-dynamo": 28,
}


@pytest.mark.parametrize("name", sorted(SEED000_OPTION2))
def test_seed000_option2_examples_are_invalid_as_written(name: str) -> None:
    problems = problems_of(load(f"seed000/{name}.yaml"))
    assert problems
    assert all("minMember and minSubGroup are mutually exclusive" in p for p in problems)
    assert problems[0].startswith("spec: ")


def seed001_style(data: dict[str, Any]) -> dict[str, Any]:
    """Seed 000 option 2 rewritten as seed 001 decides: inner nodes keep minSubGroup only."""
    spec = data["spec"]
    parents = {sub.get("parent") for sub in spec["subGroups"]}
    spec.pop("minMember", None)
    for sub in spec["subGroups"]:
        if sub["name"] in parents:
            sub.pop("minMember", None)
    return data


@pytest.mark.parametrize("name", sorted(SEED000_OPTION2))
def test_seed000_option2_examples_are_valid_seed001_style(name: str) -> None:
    data = seed001_style(load(f"seed000/{name}.yaml"))
    assert problems_of(data) == []
    tree = tree_from_podgroup(KaiPodGroup.model_validate(data))
    assert non_preemptible_pods(tree) == SEED000_OPTION2[name]


def test_seed000_option2_minmember_was_the_pod_count_where_consistent() -> None:
    # Option 2 wrote the pod count into the root's minMember; the seed-001 tree computes the same number.
    for name, count in SEED000_OPTION2.items():
        if "validation" not in name:
            assert load(f"seed000/{name}.yaml")["spec"]["minMember"] == count


@pytest.mark.parametrize("name", ["option1-inference-service", "option1-inference-grove"])
def test_seed000_option1_examples_are_invalid(name: str) -> None:
    problems = problems_of(load(f"seed000/{name}.yaml"))
    assert problems and all("not allowed on a node with child SubGroups" in p for p in problems)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"minMember": 4}, []),  # a plain gang: the root is the only leaf
        ({}, ["spec.minMember: required on a leaf: the number of pods it needs"]),
        ({"minMember": 0}, ["spec.minMember: required on a leaf: the number of pods it needs"]),
        (
            {"minSubGroup": 1},
            ["spec.minSubGroup: not allowed on a leaf (the PodGroup has no child SubGroups); use minMember"],
        ),
        ({"minMember": -2}, ["spec.minMember: must be greater than 0, got -2"]),
        (
            {"minMember": 3, "minSubGroup": 1},
            ["spec: minMember and minSubGroup are mutually exclusive; a leaf uses minMember (pods) only"],
        ),
        (
            # minMember 0 next to minSubGroup is allowed: Go omits 0, so it means unset.
            {"minMember": 0, "minSubGroup": 1, "subGroups": [{"name": "a", "minMember": 1}]},
            [],
        ),
        (
            {"subGroups": [{"name": "a", "minMember": 1}, {"name": "b", "parent": "b", "minMember": 1}]},
            [
                "spec.subGroups[1].parent: cycle: b -> b",
                # b is its own child, so it also counts as a node with children
                "spec.subGroups[1].minMember: not allowed on a node with child SubGroups (SubGroup 'b'); use minSubGroup "
                "(number of children)",
            ],
        ),
        ({"subGroups": [{"minMember": 1}]}, ["spec.subGroups[0].name: required"]),
    ],
)
def test_single_rules(spec: dict[str, Any], expected: list[str]) -> None:
    assert (
        problems_of({"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "spec": spec})
        == expected
    )


def test_cycle_is_reported_once() -> None:
    spec = {
        "subGroups": [
            {"name": "a", "parent": "c", "minSubGroup": 1},
            {"name": "b", "parent": "a", "minSubGroup": 1},
            {"name": "c", "parent": "b", "minSubGroup": 1},
            {"name": "d", "parent": "a", "minMember": 1},
        ]
    }
    problems = problems_of({"kind": "PodGroup", "spec": spec})
    assert [p for p in problems if "cycle" in p] == ["spec.subGroups[0].parent: cycle: a -> c -> b -> a"]
