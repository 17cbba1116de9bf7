"""Availability of PodCliques, PCSG replicas, PCSGs and the PCS replica (DESIGN §4.4, seed 002).

Pure and memoryless: the caller says whether a PodClique was available before (the sticky bit it keeps in
workflow state) and gets back the MinAvailableBreached condition to mirror. Breach *timing* is not decided here;
see `grove.evaluate` (breach starts) and `grove.termination` (deadlines).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from grove.topology import CliqueUnit, ScalingGroupUnit


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class BreachReason(StrEnum):
    """Condition reasons, spelled exactly as Grove spells them so kubectl users see familiar words."""

    SUFFICIENT_READY_PODS = "SufficientReadyPods"
    NEVER_AVAILABLE = "NeverAvailable"
    UPDATE_IN_PROGRESS = "UpdateInProgress"
    INSUFFICIENT_READY_PODS = "InsufficientReadyPods"
    SUFFICIENT_PCSG_REPLICAS = "SufficientAvailablePodCliqueScalingGroupReplicas"
    INSUFFICIENT_PCSG_REPLICAS = "InsufficientAvailablePodCliqueScalingGroupReplicas"


class CliqueObservation(_Frozen):
    """What an activity saw of one existing PodClique. A PCLQ that does not exist, or is being deleted, is simply
    not observed: it is never available and never breached (it is a new incarnation when it comes back)."""

    uid: str = Field(min_length=1, description="metadata.uid; a different UID is a new incarnation")
    ready: int = Field(
        default=0, ge=0, description="Ready pods that are not terminating: the only ones that count"
    )
    scheduled: int = Field(default=0, ge=0)
    gated: int = Field(default=0, ge=0, description="pods still carrying a scheduling gate")
    pods: int = Field(default=0, ge=0, description="non-terminating pods")
    update_in_progress: bool = False


class BreachCondition(_Frozen):
    """A MinAvailableBreached condition as it should be mirrored into status."""

    type: Literal["MinAvailableBreached"] = "MinAvailableBreached"
    status: ConditionStatus
    reason: BreachReason
    message: str

    @property
    def breached(self) -> bool:
        return self.status is ConditionStatus.TRUE


class CliqueHealth(_Frozen):
    """One PodClique's verdict in one evaluation."""

    condition: BreachCondition
    present: bool
    ready: int = Field(ge=0)
    min_available: int = Field(ge=1)
    was_available: bool = Field(
        description="the sticky bit for the observed incarnation, after this observation"
    )
    breach_start: AwareDatetime | None = Field(
        default=None, description="set exactly when the condition is True"
    )

    @property
    def available(self) -> bool:
        return self.present and self.ready >= self.min_available


class ScalingGroupHealth(_Frozen):
    """One PCSG's verdict in one evaluation."""

    condition: BreachCondition
    replicas: int = Field(ge=1)
    min_available: int = Field(ge=1)
    available_replicas: int = Field(
        ge=0, description="replicas whose PodCliques all exist and have enough ready pods"
    )
    healthy_replicas: int = Field(ge=0, description="replicas none of whose PodCliques is breached")
    breached_replicas: tuple[int, ...] = ()
    breach_start: AwareDatetime | None = Field(
        default=None, description="set exactly when the condition is True"
    )


def clique_condition(
    unit: CliqueUnit, observed: CliqueObservation | None, was_available: bool
) -> BreachCondition:
    """The seed-002 order: sufficient, then never-available, then rolling update, then breach."""
    if observed is None:
        return BreachCondition(
            status=ConditionStatus.FALSE,
            reason=BreachReason.NEVER_AVAILABLE,
            message=f"PodClique does not exist (yet); {unit.min_available} ready pods required",
        )
    counts = f"{observed.ready} of {unit.min_available} required pods ready"
    if observed.ready >= unit.min_available:
        return BreachCondition(
            status=ConditionStatus.FALSE, reason=BreachReason.SUFFICIENT_READY_PODS, message=counts
        )
    if not was_available:
        return BreachCondition(
            status=ConditionStatus.FALSE,
            reason=BreachReason.NEVER_AVAILABLE,
            message=f"{counts}; never available yet, so not a breach",
        )
    if observed.update_in_progress:
        return BreachCondition(
            status=ConditionStatus.UNKNOWN,
            reason=BreachReason.UPDATE_IN_PROGRESS,
            message=f"{counts}; rolling update in progress",
        )
    return BreachCondition(
        status=ConditionStatus.TRUE, reason=BreachReason.INSUFFICIENT_READY_PODS, message=counts
    )


def reaches_availability(unit: CliqueUnit, observed: CliqueObservation | None) -> bool:
    """Whether this observation sets the sticky was-available bit. Not during a rolling update: pods of a half-updated
    clique becoming ready says nothing about the incarnation having been healthy (seed 002)."""
    return observed is not None and not observed.update_in_progress and observed.ready >= unit.min_available


def scaling_group_health(
    group: ScalingGroupUnit,
    members: Mapping[int, tuple[CliqueHealth, ...]],
) -> ScalingGroupHealth:
    """Aggregate the PodCliques of each PCSG replica (`members[j]`) into the PCSG verdict (breach_start left unset:
    timing is the caller's memory).

    A replica is breached when any of its PodCliques is; absent or never-available PodCliques are not breached, so a
    replica that is being recreated counts as healthy. That is deliberate: otherwise terminating one PCSG replica
    would at once breach the PCSG as a whole and escalate to the PCS replica.
    """
    breached = tuple(
        j for j in range(group.replicas) if any(c.condition.breached for c in members.get(j, ()))
    )
    available = sum(
        1 for j in range(group.replicas) if members.get(j) and all(c.available for c in members[j])
    )
    healthy = group.replicas - len(breached)
    if healthy < group.min_available:
        condition = BreachCondition(
            status=ConditionStatus.TRUE,
            reason=BreachReason.INSUFFICIENT_PCSG_REPLICAS,
            message=f"{healthy} of {group.min_available} required replicas healthy; "
            f"breached replicas: {', '.join(map(str, breached))}",
        )
    else:
        condition = BreachCondition(
            status=ConditionStatus.FALSE,
            reason=BreachReason.SUFFICIENT_PCSG_REPLICAS,
            message=f"{healthy} of {group.min_available} required replicas healthy, {available} available",
        )
    return ScalingGroupHealth(
        condition=condition,
        replicas=group.replicas,
        min_available=group.min_available,
        available_replicas=available,
        healthy_replicas=healthy,
        breached_replicas=breached,
    )


def replica_available(
    standalone: tuple[CliqueHealth, ...], scaling_groups: tuple[ScalingGroupHealth, ...]
) -> bool:
    """A PCS replica is available when every standalone PodClique is and every PCSG has minAvailable available
    replicas (what PodCliqueSet status.availableReplicas counts)."""
    return all(c.available for c in standalone) and all(
        g.available_replicas >= g.min_available for g in scaling_groups
    )
