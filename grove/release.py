"""Which gated pods may be released now (DESIGN §4.3, seeds 003 and 004).

- Base gang pods: as soon as they are listed in the base PodGang's podReferences.
- Scaled gang pods: only once the base gang is scheduled, i.e. every base podgroup (one per PodClique) has at least
  minReplicas (= the PodClique's minAvailable) pods with PodScheduled=True; or Ready pods when the PCS asks for
  `grove-temporal.io/scaled-release-after: Ready`.
- Each scaled gang on its own: none waits for another.

Gang membership is derived from the topology alone: the base gang holds every standalone PodClique and the
PodCliques of scaling group replicas 0 .. minAvailable-1; replica j >= minAvailable is scaled gang j - minAvailable.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from grove import names
from grove.topology import CliqueUnit, ReplicaTopology

ReleaseAfter = Literal["Scheduled", "Ready"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CliqueGateState(_Frozen):
    """What the release rule needs to know about one PodClique (absent ones are simply not given)."""

    scheduled: int = Field(default=0, ge=0, description="non-terminating pods with PodScheduled=True")
    ready: int = Field(default=0, ge=0, description="non-terminating Ready pods")
    releasable: tuple[str, ...] = Field(
        default=(), description="pods still carrying our gate that their PodGang already references"
    )


class GateDecision(_Frozen):
    base_gang: str
    base_gang_ready: bool = Field(description="scheduled (or Ready) enough for scaled gangs to go")
    base: tuple[str, ...] = Field(default=(), description="base gang pods to release now")
    scaled: dict[str, tuple[str, ...]] = Field(default_factory=dict, description="scaled gang -> pods to release")
    held: dict[str, tuple[str, ...]] = Field(
        default_factory=dict, description="scaled gang -> pods that must wait for the base gang"
    )
    waiting_for: tuple[str, ...] = Field(
        default=(), description="base PodCliques below minAvailable scheduled/ready pods"
    )

    @property
    def pods(self) -> tuple[str, ...]:
        return self.base + tuple(pod for pods in self.scaled.values() for pod in pods)


def releasable(gated_by_us: bool, pod: str, gang_references: Collection[str]) -> bool:
    """A pod's gate may be considered for release only while our gate is on it and its PodGang already lists it in
    podReferences: a pod released before its gang references it could be scheduled outside the gang."""
    return gated_by_us and pod in gang_references


def gang_of(topology: ReplicaTopology, unit: CliqueUnit) -> str:
    """The PodGang a PodClique belongs to."""
    min_available = (topology.scaling_group(unit.scaling_group).min_available
                     if unit.scaling_group is not None else 0)
    return names.podgang_of(topology.pcs, topology.replica, unit.scaling_group, unit.scaling_group_replica,
                            min_available)


def gangs_of_termination(topology: ReplicaTopology, cliques: Collection[str], whole_replica: bool) -> tuple[str, ...]:
    """The PodGangs that go with a gang termination: every gang of the replica when the whole PCS replica goes;
    for a scaling group replica, the scaled gangs of its PodCliques and never the base gang, whose other members
    stay."""
    base = names.base_podgang_name(topology.pcs, topology.replica)
    gangs = {gang_of(topology, unit) for unit in topology.cliques if whole_replica or unit.name in cliques}
    if not whole_replica:
        gangs.discard(base)
    return tuple(sorted(gangs))


def base_members(topology: ReplicaTopology) -> tuple[CliqueUnit, ...]:
    base = names.base_podgang_name(topology.pcs, topology.replica)
    return tuple(unit for unit in topology.cliques if gang_of(topology, unit) == base)


def decide_releases(
    topology: ReplicaTopology,
    cliques: Mapping[str, CliqueGateState],
    release_after: ReleaseAfter = "Scheduled",
) -> GateDecision:
    base_gang = names.base_podgang_name(topology.pcs, topology.replica)
    base_pods: list[str] = []
    scaled: dict[str, list[str]] = {}
    lagging: list[str] = []
    for unit in topology.cliques:
        state = cliques.get(unit.name)
        gang = gang_of(topology, unit)
        if gang == base_gang:
            count = 0 if state is None else (state.ready if release_after == "Ready" else state.scheduled)
            if count < unit.min_available:
                lagging.append(unit.name)
            if state is not None:
                base_pods.extend(state.releasable)
        elif state is not None and state.releasable:
            scaled.setdefault(gang, []).extend(state.releasable)
    ready = not lagging
    frozen_scaled = {gang: tuple(pods) for gang, pods in scaled.items()}
    return GateDecision(
        base_gang=base_gang,
        base_gang_ready=ready,
        base=tuple(base_pods),
        scaled=frozen_scaled if ready else {},
        held={} if ready else frozen_scaled,
        waiting_for=tuple(lagging),
    )


def base_lagging(requires: Mapping[str, int], counts: Mapping[str, int]) -> list[str]:
    """`PodClique (n of m)` for each base PodClique with fewer pods scheduled (or Ready) than it needs, from a fresh
    read: a scaled gang is released only while none lags."""
    return [f"{name} ({counts.get(name, 0)} of {need})" for name, need in sorted(requires.items())
            if counts.get(name, 0) < need]
