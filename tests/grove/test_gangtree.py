"""The gang tree (DESIGN §5): evaluation, non-preemptible pods, KAI export and import."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from grove.gangtree import (
    GangNode,
    InvalidPodGroup,
    evaluate,
    kai_podgroup,
    non_preemptible_pods,
    podgroup_from_tree,
    satisfied,
    tree_for,
    tree_from_podgroup,
)
from grove.models import KaiPodGroup, PodCliqueSet
from grove.plan import plan_replica
from grove.validation import validate_podgroup
from tests.grove.strategies import valid_pcs

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PREFILL = PodCliqueSet.model_validate(yaml.safe_load((EXAMPLES / "prefill-scaling.yaml").read_text()))
KAI = {d["metadata"]["name"]: d for d in yaml.safe_load_all((EXAMPLES / "kai-podgroups.yaml").read_text())}


def test_seed001_two_level_example_needs_10_non_preemptible_pods() -> None:
    assert non_preemptible_pods(tree_from_podgroup(KaiPodGroup.model_validate(KAI["training-job"]))) == 10


def test_seed000_dynamo_written_seed001_style_needs_28() -> None:
    assert non_preemptible_pods(tree_from_podgroup(KaiPodGroup.model_validate(KAI["dynamo-inference"]))) == 28


def test_invalid_podgroup_is_refused() -> None:
    data = dict(KAI["training-job"])
    data["spec"] = {**data["spec"], "minMember": 10}
    with pytest.raises(InvalidPodGroup, match="spec: minMember and minSubGroup are mutually exclusive"):
        tree_from_podgroup(KaiPodGroup.model_validate(data))


def test_design_tree_of_the_seed003_replica() -> None:
    tree = tree_for(plan_replica(PREFILL, 0))
    assert tree.name == "my-pcs-0" and tree.min_sub_group is None
    (group,) = tree.children
    assert (group.name, group.min_sub_group) == ("my-pcs-0-prefill", 3)
    assert [r.name for r in group.children] == [f"my-pcs-0-prefill-{j}" for j in range(5)]
    assert [(leaf.name, leaf.min_member) for leaf in group.children[4].children] == [
        ("my-pcs-0-prefill-4-leader", 1),
        ("my-pcs-0-prefill-4-worker", 2),
    ]
    # any 3 of 5 replicas, each 1 leader + 2 workers
    assert non_preemptible_pods(tree) == 9


def test_evaluation_answers_schedulable_and_available_alike() -> None:
    tree = tree_for(plan_replica(PREFILL, 0))
    counts = {f"my-pcs-0-prefill-{j}-leader": 1 for j in range(5)}
    counts |= {f"my-pcs-0-prefill-{j}-worker": 2 for j in (0, 2, 4)}
    result = evaluate(tree, counts)
    assert [result[f"my-pcs-0-prefill-{j}"] for j in range(5)] == [True, False, True, False, True]
    assert result["my-pcs-0-prefill"] and result["my-pcs-0"]
    counts["my-pcs-0-prefill-4-worker"] = 1
    assert not satisfied(tree, counts)
    assert evaluate(tree, {}) == {node.name: False for node in tree.walk()}


def test_kai_export_requires_every_child_by_default() -> None:
    exported = kai_podgroup(plan_replica(PREFILL, 0))
    wire = exported.to_wire()
    assert wire["apiVersion"] == "scheduling.run.ai/v2alpha2" and wire["kind"] == "PodGroup"
    assert wire["metadata"]["name"] == "my-pcs-0"
    assert all("minSubGroup" not in sub for sub in wire["spec"]["subGroups"])
    assert "minSubGroup" not in wire["spec"] and "minMember" not in wire["spec"]
    assert validate_podgroup(exported) == []
    assert non_preemptible_pods(tree_from_podgroup(exported)) == 15  # all 5 replicas


def test_kai_export_elastic_emits_min_available_over_all_replicas() -> None:
    exported = kai_podgroup(
        plan_replica(PREFILL, 0), elastic=True, queue="inference", preemptibility="preemptible"
    )
    subs = {sub.name: sub for sub in exported.spec.sub_groups or []}
    assert subs["my-pcs-0-prefill"].min_sub_group == 3
    assert subs["my-pcs-0-prefill-4"].parent == "my-pcs-0-prefill"
    assert subs["my-pcs-0-prefill-4-worker"].min_member == 2
    assert (exported.spec.queue, exported.spec.preemptibility) == ("inference", "preemptible")
    assert validate_podgroup(exported) == []
    assert non_preemptible_pods(tree_from_podgroup(exported)) == 9


# --- properties ---------------------------------------------------------------------------------------------
def trees(max_depth: int = 3) -> st.SearchStrategy[GangNode]:
    counter = itertools.count()

    def leaf() -> st.SearchStrategy[GangNode]:
        return st.integers(1, 6).map(lambda m: GangNode(f"n{next(counter)}", min_member=m))

    def inner(children: st.SearchStrategy[GangNode]) -> st.SearchStrategy[GangNode]:
        return st.lists(children, min_size=1, max_size=3).flatmap(
            lambda kids: st.one_of(st.none(), st.integers(1, len(kids))).map(
                lambda k: GangNode(f"n{next(counter)}", min_sub_group=k, children=tuple(kids))
            )
        )

    return st.recursive(leaf(), inner, max_leaves=8)


def brute_force_minimum(tree: GangNode) -> int:
    """The fewest pods that satisfy the tree, by trying every subset of leaves at their minMember."""
    leaves = list(tree.leaves())
    best = None
    for chosen in itertools.product([False, True], repeat=len(leaves)):
        counts = {
            leaf.name: (leaf.min_member or 0) if pick else 0
            for leaf, pick in zip(leaves, chosen, strict=True)
        }
        if satisfied(tree, counts):
            total = sum(counts.values())
            best = total if best is None else min(best, total)
    assert best is not None
    return best


@settings(max_examples=200, deadline=None)
@given(trees())
def test_non_preemptible_is_the_true_minimum(tree: GangNode) -> None:
    assert non_preemptible_pods(tree) == brute_force_minimum(tree)


@settings(max_examples=200, deadline=None)
@given(trees(), st.data())
def test_more_pods_never_break_satisfaction(tree: GangNode, data: st.DataObject) -> None:
    leaves = [leaf.name for leaf in tree.leaves()]
    counts = {name: data.draw(st.integers(0, 6)) for name in leaves}
    more = {name: count + data.draw(st.integers(0, 3)) for name, count in counts.items()}
    before, after = evaluate(tree, counts), evaluate(tree, more)
    assert all(after[name] for name, ok in before.items() if ok)
    assert satisfied(tree, {leaf.name: leaf.min_member or 0 for leaf in tree.leaves()})


@settings(max_examples=200, deadline=None)
@given(trees())
def test_podgroup_export_and_import_round_trip(tree: GangNode) -> None:
    exported = podgroup_from_tree(tree)
    if tree.is_leaf:
        assert exported.spec.sub_groups is None
    assert validate_podgroup(exported) == []
    assert tree_from_podgroup(KaiPodGroup.model_validate(exported.to_wire())) == tree


@settings(max_examples=100, deadline=None)
@given(valid_pcs(max_replicas=1))
def test_replica_tree_round_trips_through_elastic_kai_export(data: dict[str, Any]) -> None:
    pcs = PodCliqueSet.model_validate(data)
    plan = plan_replica(pcs, 0)
    tree = tree_for(plan)
    assert tree_from_podgroup(kai_podgroup(plan, elastic=True)) == tree
    assert {leaf.name for leaf in tree.leaves()} == {p.name for p in plan.pod_cliques}
    strict = tree_from_podgroup(kai_podgroup(plan))
    assert non_preemptible_pods(strict) == sum(p.min_available for p in plan.pod_cliques)
