"""The shape of one PCS replica as the health and termination decisions see it.

This is the contract between the planner (which knows names, gangs and pod templates) and the pure decision
functions (which only need who belongs to which scaling group, the thresholds and the delays). Keeping it this
small lets the workflow carry it in history cheaply and lets property tests generate it directly.
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel, ConfigDict, Field


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CliqueUnit(_Frozen):
    """One PodClique (PCLQ object) of the replica."""

    name: str = Field(description="PCLQ object name, e.g. 'p-0-frontend' or 'p-0-sg-1-worker'")
    clique: str = Field(description="the clique template name it was made from")
    replicas: int = Field(ge=1, description="desired pods")
    min_available: int = Field(ge=1, description="ready pods needed to be available")
    scaling_group: str | None = Field(default=None, description="PCSG object name, None when standalone")
    scaling_group_replica: int | None = Field(default=None, description="PCSG replica index j")
    starts_after: tuple[str, ...] = Field(
        default=(), description="PodCliques of the same gang whose pods must all be Ready before this one starts"
    )


class ScalingGroupUnit(_Frozen):
    """One PodCliqueScalingGroup (PCSG object) of the replica."""

    name: str = Field(description="PCSG object name, e.g. 'p-0-sg'")
    config_name: str = Field(description="the podCliqueScalingGroups[] entry name, e.g. 'sg'")
    replicas: int = Field(ge=1)
    min_available: int = Field(ge=1)
    termination_delay: timedelta | None = Field(default=None, description="the PCSG's own override")


class ReplicaTopology(_Frozen):
    """Everything the pure decisions need to know about one PCS replica's structure."""

    pcs: str
    replica: int = Field(ge=0)
    cliques: tuple[CliqueUnit, ...]
    scaling_groups: tuple[ScalingGroupUnit, ...] = ()
    termination_delay: timedelta | None = Field(
        default=None, description="PCS-level terminationDelay; None disables gang termination"
    )

    def clique(self, name: str) -> CliqueUnit:
        for unit in self.cliques:
            if unit.name == name:
                return unit
        raise KeyError(name)

    def scaling_group(self, name: str) -> ScalingGroupUnit:
        for unit in self.scaling_groups:
            if unit.name == name:
                return unit
        raise KeyError(name)

    def members(self, scaling_group: str, replica: int) -> tuple[CliqueUnit, ...]:
        """The PCLQs of one PCSG replica."""
        return tuple(
            c for c in self.cliques if c.scaling_group == scaling_group and c.scaling_group_replica == replica
        )

    def standalone(self) -> tuple[CliqueUnit, ...]:
        return tuple(c for c in self.cliques if c.scaling_group is None)

    def effective_delay(self, scaling_group: str | None) -> timedelta | None:
        """PCSG override if set, else the PCS delay; None whenever the PCS delay is unset (seed 002)."""
        if self.termination_delay is None:
            return None
        if scaling_group is None:
            return self.termination_delay
        own = self.scaling_group(scaling_group).termination_delay
        return own if own is not None else self.termination_delay
