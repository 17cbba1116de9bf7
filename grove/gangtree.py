"""The hierarchical gang tree of one replica (DESIGN §5, seeds 000 and 001).

    PCS replica i            minSubGroup = all children
    ├── standalone PCLQ      minMember = clique minAvailable (pods)
    └── PCSG sg              minSubGroup = sg.minAvailable
        └── PCSG replica j   minSubGroup = all its cliques
            └── PCLQ         minMember = clique minAvailable

One evaluator serves both questions: given scheduled pod counts per leaf it says whether the gang is
schedulable; given ready pod counts, whether the replica is available. The same tree exports to, and is read
from, a KAI `scheduling.run.ai/v2alpha2` PodGroup.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace

from grove import names
from grove.models import KaiPodGroup, KaiPodGroupSpec, ObjectMeta, SubGroup
from grove.plan import ReplicaPlan
from grove.podgroup_rules import podgroup_tree_problems
from grove.problems import Problem


class InvalidPodGroup(ValueError):
    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("invalid PodGroup:\n" + "\n".join(f"  {p}" for p in problems))


@dataclass(frozen=True)
class GangNode:
    """A leaf counts pods (min_member); an inner node counts satisfied children (min_sub_group, None = all)."""

    name: str
    min_member: int | None = None
    min_sub_group: int | None = None
    children: tuple[GangNode, ...] = field(default=())

    @property
    def is_leaf(self) -> bool:
        return not self.children

    @property
    def required_children(self) -> int:
        return len(self.children) if self.min_sub_group is None else self.min_sub_group

    def walk(self) -> Iterator[GangNode]:
        """This node and every descendant, parents before children."""
        yield self
        for child in self.children:
            yield from child.walk()

    def leaves(self) -> Iterator[GangNode]:
        return (node for node in self.walk() if node.is_leaf)

    def find(self, name: str) -> GangNode:
        for node in self.walk():
            if node.name == name:
                return node
        raise KeyError(name)


# --- Building ----------------------------------------------------------------------------------------------
def tree_for(plan: ReplicaPlan) -> GangNode:
    """The DESIGN §5 tree of one replica; leaves are PodClique names."""
    leaf = {p.name: GangNode(p.name, min_member=p.min_available) for p in plan.pod_cliques}
    children = [leaf[p.name] for p in plan.standalone()]
    for group in plan.scaling_groups:
        replicas = tuple(
            GangNode(
                names.pcsg_replica_name(group.name, j),
                children=tuple(leaf[p.name] for p in plan.members(group.name, j)),
            )
            for j in range(group.replicas)
        )
        children.append(GangNode(group.name, min_sub_group=group.min_available, children=replicas))
    return GangNode(names.replica_prefix(plan.pcs, plan.replica), children=tuple(children))


def tree_from_podgroup(podgroup: KaiPodGroup) -> GangNode:
    """Read a KAI PodGroup as a gang tree. Raises InvalidPodGroup unless it passes the seed 001 rules."""
    problems = podgroup_tree_problems(podgroup)
    if problems:
        raise InvalidPodGroup(problems)
    subs = podgroup.spec.sub_groups or []

    def build(name: str, parent: str | None, min_member: int | None, min_sub_group: int | None) -> GangNode:
        kids = tuple(build(s.name, s.name, s.min_member, s.min_sub_group) for s in subs if s.parent == parent)
        return GangNode(name, min_member=min_member or None, min_sub_group=min_sub_group, children=kids)

    spec = podgroup.spec
    return build(podgroup.metadata.name or "", None, spec.min_member, spec.min_sub_group)


# --- Evaluating --------------------------------------------------------------------------------------------
def evaluate(tree: GangNode, pod_counts: Mapping[str, int]) -> dict[str, bool]:
    """Whether each node is satisfied, given pod counts per leaf name (missing leaves count 0).

    Pass scheduled counts to ask "schedulable", ready counts to ask "available".
    """
    result: dict[str, bool] = {}

    def visit(node: GangNode) -> bool:
        if node.is_leaf:
            ok = pod_counts.get(node.name, 0) >= (node.min_member or 0)
        else:
            ok = sum(visit(child) for child in node.children) >= node.required_children
        result[node.name] = ok
        return ok

    visit(tree)
    return result


def satisfied(tree: GangNode, pod_counts: Mapping[str, int]) -> bool:
    return evaluate(tree, pod_counts)[tree.name]


def non_preemptible_pods(tree: GangNode) -> int:
    """The fewest pods that satisfy the tree: a leaf costs minMember, an inner node with threshold k the sum of
    its k cheapest children (seed 001: (1+4)+(1+4) = 10)."""
    if tree.is_leaf:
        return tree.min_member or 0
    costs = sorted(non_preemptible_pods(child) for child in tree.children)
    return sum(costs[: tree.required_children])


# --- Exporting ---------------------------------------------------------------------------------------------
def podgroup_from_tree(tree: GangNode, namespace: str | None = None) -> KaiPodGroup:
    """A KAI PodGroup with one SubGroup per non-root node; thresholds as in the tree (None stays unset)."""
    subs: list[SubGroup] = []

    def add(node: GangNode, parent: str | None) -> None:
        subs.append(
            SubGroup(
                name=node.name,
                parent=parent,
                min_member=node.min_member if node.is_leaf else None,
                min_sub_group=None if node.is_leaf else node.min_sub_group,
            )
        )
        for child in node.children:
            add(child, node.name)

    for child in tree.children:
        add(child, None)
    spec = KaiPodGroupSpec(
        min_member=tree.min_member if tree.is_leaf else None,
        min_sub_group=None if tree.is_leaf else tree.min_sub_group,
        sub_groups=subs or None,
    )
    return KaiPodGroup(metadata=ObjectMeta(name=tree.name, namespace=namespace), spec=spec)


def kai_podgroup(
    plan: ReplicaPlan,
    *,
    elastic: bool = False,
    queue: str | None = None,
    priority_class_name: str | None = None,
    preemptibility: str | None = None,
) -> KaiPodGroup:
    """The KAI PodGroup of one replica, named after the replica (`p-i`).

    Default: every child is required (minSubGroup unset everywhere), as Grove's own gangs behave.
    elastic: each scaling group node carries minSubGroup = minAvailable over all its replicas, so a scheduler that
    implements seed 001 may start the replica with any minAvailable of them ("any 3 of 4 prefill replicas").
    """
    groups = {group.name for group in plan.scaling_groups}

    def shape(node: GangNode) -> GangNode:
        children = tuple(shape(child) for child in node.children)
        threshold = node.min_sub_group if elastic or node.name not in groups else None
        return replace(node, children=children, min_sub_group=threshold)

    podgroup = podgroup_from_tree(shape(tree_for(plan)), plan.namespace)
    podgroup.metadata.labels = {
        names.LABEL_MANAGED_BY: names.MANAGED_BY,
        names.LABEL_PART_OF: plan.pcs,
        names.LABEL_PCS_REPLICA_INDEX: str(plan.replica),
    }
    podgroup.spec.queue = queue
    podgroup.spec.priority_class_name = priority_class_name
    podgroup.spec.preemptibility = preemptibility
    return podgroup
