"""Seed 001's validation rules for a KAI PodGroup tree (`spec` is the root, `spec.subGroups[]` the other nodes).

- minMember counts pods and belongs to leaves; minSubGroup counts direct children and belongs to inner nodes;
  both on one node is an error (they are mutually exclusive; a minMember of 0 counts as unset, as in Go).
- minSubGroup on a leaf, a leaf without minMember, and minMember on an inner node are errors.
- minSubGroup must be between 1 and the number of direct children; unset means all children.
- SubGroup names are unique, parents exist, and parent links have no cycles.
"""

from __future__ import annotations

from collections.abc import Iterator

from grove.models import KaiPodGroup
from grove.problems import Problem


def podgroup_tree_problems(podgroup: KaiPodGroup) -> list[Problem]:
    return list(_problems(podgroup))


def _problems(podgroup: KaiPodGroup) -> Iterator[Problem]:
    subs = podgroup.spec.sub_groups or []
    index_of: dict[str, int] = {}
    for index, sub in enumerate(subs):
        path = f"spec.subGroups[{index}].name"
        if not sub.name:
            yield Problem(path, "required")
        elif sub.name in index_of:
            yield Problem(
                path, f"duplicate SubGroup name {sub.name!r} (also subGroups[{index_of[sub.name]}])"
            )
        else:
            index_of[sub.name] = index
    for index, sub in enumerate(subs):
        if sub.parent is not None and sub.parent not in index_of:
            yield Problem(f"spec.subGroups[{index}].parent", f"unknown parent {sub.parent!r}")
    yield from _cycle_problems(podgroup, index_of)

    children: dict[str | None, int] = {}
    for sub in subs:
        children[sub.parent] = children.get(sub.parent, 0) + 1
    yield from _node_problems(
        "spec", None, podgroup.spec.min_member, podgroup.spec.min_sub_group, children.get(None, 0)
    )
    for index, sub in enumerate(subs):
        # Children attach by name; with duplicate names they attach to the first, which is already an error.
        count = children.get(sub.name, 0) if index_of.get(sub.name) == index else 0
        yield from _node_problems(
            f"spec.subGroups[{index}]", sub.name, sub.min_member, sub.min_sub_group, count
        )


def _cycle_problems(podgroup: KaiPodGroup, index_of: dict[str, int]) -> Iterator[Problem]:
    subs = podgroup.spec.sub_groups or []
    reported: set[str] = set()
    for start in range(len(subs)):
        chain: list[str] = []
        name: str | None = subs[start].name
        while name is not None and name in index_of and name not in chain:
            chain.append(name)
            name = subs[index_of[name]].parent
        if name is None or name not in chain:
            continue  # reached the root, or an unknown parent (reported above)
        cycle = chain[chain.index(name) :]
        if reported.isdisjoint(cycle):
            reported.update(cycle)
            first = min(cycle, key=index_of.__getitem__)
            rotated = cycle[cycle.index(first) :] + cycle[: cycle.index(first)]
            yield Problem(
                f"spec.subGroups[{index_of[first]}].parent", "cycle: " + " -> ".join([*rotated, first])
            )


def _node_problems(
    path: str, name: str | None, min_member: int | None, min_sub_group: int | None, children: int
) -> Iterator[Problem]:
    """The rules of one node; `name` is the SubGroup's name, None for the PodGroup itself."""
    where = f" (SubGroup {name!r})" if name is not None else ""
    if min_member is not None and min_member < 0:
        yield Problem(f"{path}.minMember", f"must be greater than 0, got {min_member}{where}")
    has_min_member = bool(min_member)  # Go omits 0: 0 means unset
    leaf = children == 0
    if has_min_member and min_sub_group is not None:
        uses = "a leaf uses minMember (pods) only" if leaf else "a node with children uses minSubGroup only"
        yield Problem(path, f"minMember and minSubGroup are mutually exclusive{where}; {uses}")
        return
    if leaf:
        if min_sub_group is not None:
            subject = f"SubGroup {name!r}" if name is not None else "the PodGroup"
            yield Problem(
                f"{path}.minSubGroup",
                f"not allowed on a leaf ({subject} has no child SubGroups); use minMember",
            )
        elif not has_min_member:
            yield Problem(f"{path}.minMember", f"required on a leaf{where}: the number of pods it needs")
        return
    if has_min_member:
        yield Problem(
            f"{path}.minMember",
            f"not allowed on a node with child SubGroups{where}; use minSubGroup (number of children)",
        )
    if min_sub_group is not None and not 1 <= min_sub_group <= children:
        yield Problem(
            f"{path}.minSubGroup",
            f"must be between 1 and the number of direct child SubGroups ({children}), got {min_sub_group}{where}",
        )
