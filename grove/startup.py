"""Startup order among the PodCliques of one PodGang (DESIGN §4.10; Grove's `cliqueStartupType`/`startsAfter`).

- `CliqueStartupTypeAnyOrder` (default): no order.
- `CliqueStartupTypeInOrder`: each clique starts after the clique before it in `spec.template.cliques`.
- `CliqueStartupTypeExplicit`: each clique starts after the cliques its `startsAfter` names (a forest of DAGs).

Order holds inside one PodGang only, as in Grove: a clique of the base gang waits for the PodCliques of its parent
cliques that are in the base gang (standalone ones, and scaling-group replicas 0 .. minAvailable-1); a clique of a
scaled gang waits for its parents in the same scaling-group replica and for nothing in the base gang.

"Started" means every pod of the parent PodCliques is Ready (Grove's init container waits for minAvailable Ready
pods; this project waits for all of them, as DESIGN §4.10 asks). The gang itself is still released as a whole: the
gates of all its pods go together and the pods are placed together; a waiting pod sits in its init container.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from grove import names
from grove.models import PodCliqueSet
from grove.problems import Problem
from grove.topology import ReplicaTopology


def startup_type(pcs: PodCliqueSet) -> str:
    return pcs.spec.template.clique_startup_type or names.STARTUP_ANY_ORDER


def clique_dependencies(pcs: PodCliqueSet) -> dict[str, tuple[str, ...]]:
    """Template level: clique name -> the clique names it starts after (only cliques that wait are listed).
    Assumes a validated PCS."""
    kind = startup_type(pcs)
    cliques = pcs.spec.template.cliques
    if kind == names.STARTUP_IN_ORDER:
        return {c.name: (cliques[i - 1].name,) for i, c in enumerate(cliques) if i > 0}
    if kind == names.STARTUP_EXPLICIT:
        return {c.name: tuple(dict.fromkeys(c.spec.starts_after)) for c in cliques if c.spec.starts_after}
    return {}


class PodCliqueRef(BaseModel):
    """What the resolution needs to know of a planned PodClique."""

    model_config = ConfigDict(frozen=True)
    name: str
    clique: str
    pod_gang: str


def resolve(dependencies: Mapping[str, tuple[str, ...]], pod_cliques: list[PodCliqueRef]) -> dict[str, tuple[str, ...]]:
    """Replica level: PodClique name -> the PodCliques of the same PodGang it starts after (sorted)."""
    result: dict[str, tuple[str, ...]] = {}
    for pclq in pod_cliques:
        parents = set(dependencies.get(pclq.clique, ()))
        if not parents:
            continue
        found = sorted(p.name for p in pod_cliques if p.pod_gang == pclq.pod_gang and p.clique in parents)
        if found:
            result[pclq.name] = tuple(found)
    return result


# --- validation ------------------------------------------------------------------------------------------------
def startup_problems(pcs: PodCliqueSet) -> Iterator[Problem]:
    """cliqueStartupType must be one of Grove's three; with Explicit, every startsAfter names another existing
    clique once, and the dependencies form no cycle (Grove's webhook rules, with field paths)."""
    template = pcs.spec.template
    kind = template.clique_startup_type
    if kind is not None and kind not in names.STARTUP_TYPES:
        yield Problem("spec.template.cliqueStartupType", f"must be one of {', '.join(names.STARTUP_TYPES)}, got {kind!r}")
        return
    if kind != names.STARTUP_EXPLICIT:
        return
    known = {c.name for c in template.cliques}
    edges: dict[str, list[str]] = {}
    for index, clique in enumerate(template.cliques):
        seen: set[str] = set()
        for position, parent in enumerate(clique.spec.starts_after or []):
            path = f"spec.template.cliques[{index}].spec.startsAfter[{position}]"
            if not parent:
                yield Problem(path, "must not be empty")
            elif parent == clique.name:
                yield Problem(path, f"clique {clique.name!r} cannot start after itself")
            elif parent not in known:
                yield Problem(path, f"unknown clique {parent!r}")
            elif parent in seen:
                yield Problem(path, f"clique {parent!r} is listed twice")
            else:
                edges.setdefault(clique.name, []).append(parent)
            seen.add(parent)
    for cycle in _cycles(edges):
        first = next(i for i, c in enumerate(template.cliques) if c.name == cycle[0])
        yield Problem(f"spec.template.cliques[{first}].spec.startsAfter",
                      "circular startup dependency: " + " -> ".join([*cycle, cycle[0]]))


def startup_warnings(pcs: PodCliqueSet) -> Iterator[Problem]:
    """startsAfter is only read with cliqueStartupType Explicit (as in Grove): say so instead of ignoring it."""
    if pcs.spec.template.clique_startup_type == names.STARTUP_EXPLICIT:
        return
    for index, clique in enumerate(pcs.spec.template.cliques):
        if clique.spec.starts_after:
            yield Problem(f"spec.template.cliques[{index}].spec.startsAfter",
                          f"ignored: spec.template.cliqueStartupType is {startup_type(pcs)}, not "
                          f"{names.STARTUP_EXPLICIT}")


def _cycles(edges: Mapping[str, list[str]]) -> list[list[str]]:
    """Each cycle once, as the path that closes it, found by depth-first search in a stable order."""
    found: list[list[str]] = []
    reported: set[frozenset[str]] = set()
    state: dict[str, int] = {}  # 1 on the stack, 2 done

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        stack.append(node)
        for parent in edges.get(node, ()):
            if state.get(parent) == 1:
                cycle = stack[stack.index(parent):]
                if frozenset(cycle) not in reported:
                    reported.add(frozenset(cycle))
                    found.append(cycle)
            elif parent not in state:
                visit(parent, stack)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [])
    return found


# --- decisions -------------------------------------------------------------------------------------------------
class CliqueStartupState(BaseModel):
    """What the startup decision needs to know about one live PodClique."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    pods: int = Field(default=0, ge=0)
    ready: int = Field(default=0, ge=0)
    waiting: tuple[str, ...] = Field(default=(), description="its pods still marked Waiting")


class StartupDecision(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    release: dict[str, tuple[str, ...]] = Field(default_factory=dict, description="PodClique -> pods to start now")
    waiting: dict[str, tuple[str, ...]] = Field(
        default_factory=dict, description="PodClique -> the PodCliques it still waits for"
    )

    @property
    def pods(self) -> tuple[str, ...]:
        return tuple(pod for pods in self.release.values() for pod in pods)

    def lines(self, ready: Mapping[str, tuple[int, int]] | None = None) -> tuple[str, ...]:
        """'p-0-decode waits for p-0-prefill Ready (1/2)' — for the status query and the Temporal UI."""
        ready = ready or {}
        out = []
        for pclq, parents in sorted(self.waiting.items()):
            parts = []
            for parent in parents:
                counts = ready.get(parent)
                parts.append(f"{parent} Ready ({counts[0]}/{counts[1]})" if counts else f"{parent} Ready")
            out.append(f"{pclq} waits for {', '.join(parts)}")
        return tuple(out)


def all_ready(unit_replicas: int, state: CliqueStartupState | None) -> bool:
    return state is not None and state.pods >= unit_replicas and state.ready >= unit_replicas


def decide_starts(topology: ReplicaTopology, states: Mapping[str, CliqueStartupState]) -> StartupDecision:
    """Which waiting pods may start now: those of PodCliques whose parents have every pod Ready. Pods still marked
    Waiting whose PodClique no longer waits for anything (the order was removed) start as well."""
    replicas = {unit.name: unit.replicas for unit in topology.cliques}
    release: dict[str, tuple[str, ...]] = {}
    waiting: dict[str, tuple[str, ...]] = {}
    for unit in topology.cliques:
        parents = unit.starts_after
        blocked = tuple(p for p in parents if not all_ready(replicas.get(p, 1), states.get(p)))
        state = states.get(unit.name)
        if blocked and (state is None or state.waiting):  # started pods are not held back by a later failure
            waiting[unit.name] = blocked
        elif state is not None and state.waiting:
            release[unit.name] = state.waiting
    return StartupDecision(release=release, waiting=waiting)


# --- pods ------------------------------------------------------------------------------------------------------
def wait_image(pcs: PodCliqueSet) -> str:
    return (pcs.metadata.annotations or {}).get(names.ANNOTATION_STARTUP_WAIT_IMAGE) or names.DEFAULT_STARTUP_WAIT_IMAGE


def add_startup_wait(spec: dict[str, Any], annotations: dict[str, str], starts_after: tuple[str, ...],
                     image: str) -> None:
    """Make a pod wait before its containers start: annotated Waiting, with a first init container that reads the
    pod's own annotations (downward API volume, which the kubelet refreshes) until the workflow marks it Released.
    The pod needs no API access and no ServiceAccount token for it."""
    annotations[names.ANNOTATION_STARTUP] = names.STARTUP_WAITING
    annotations[names.ANNOTATION_STARTS_AFTER] = ",".join(starts_after)
    released = f'{names.ANNOTATION_STARTUP}="{names.STARTUP_RELEASED}"'
    wait = {
        "name": names.STARTUP_WAIT_CONTAINER,
        "image": image,
        "command": ["sh", "-c", f"until grep -qx '{released}' {names.STARTUP_PODINFO_PATH}/annotations; "
                                "do sleep 1; done"],
        "volumeMounts": [{"name": names.STARTUP_PODINFO_VOLUME, "mountPath": names.STARTUP_PODINFO_PATH,
                          "readOnly": True}],
    }
    others = [c for c in spec.get("initContainers") or [] if c.get("name") != names.STARTUP_WAIT_CONTAINER]
    spec["initContainers"] = [wait, *others]
    volumes = [v for v in spec.get("volumes") or [] if v.get("name") != names.STARTUP_PODINFO_VOLUME]
    spec["volumes"] = [*volumes, {"name": names.STARTUP_PODINFO_VOLUME, "downwardAPI": {
        "items": [{"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}}]}}]
