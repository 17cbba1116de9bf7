"""Gang termination plan for one PCS replica (DESIGN §4.5, seed 002).

Input: the availability verdicts of one evaluation (with their breach starts) and `now`. Output: the deadlines still
pending and the terminations due now. Rules, in the order they are applied:

* PCS `terminationDelay` unset: nothing, ever.
* PCS-replica scope: a PCSG breached as a whole (its effective delay) or a standalone PodClique breached (the PCS
  delay). Every PodClique of the replica is deleted, healthy ones too.
* PCSG-replica scope: a PCSG replica with a breached PodClique, only while its PCSG is not breached as a whole (then
  the PCS level owns the decision). The replica's breach start is the earliest start among its breached PodCliques:
  Grove checks every PodClique's transition time + delay and acts on the first to expire, which is the same thing.
* Due exactly when `now >= breach start + delay`, never before. A PCS-replica termination due now supersedes the
  PCSG-replica ones due in the same evaluation: deleting the whole replica includes them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from grove.availability import CliqueHealth, ScalingGroupHealth
from grove.durations import format_duration
from grove.topology import ReplicaTopology


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Scope(StrEnum):
    PCS_REPLICA = "pcs-replica"
    PCSG_REPLICA = "pcsg-replica"


class Deadline(_Frozen):
    """One running breach clock."""

    scope: Scope = Field(description="what gets terminated when it expires")
    target: str = Field(
        description="standalone PCLQ or PCSG name (pcs-replica scope), '<pcsg>-<j>' (pcsg-replica)"
    )
    scaling_group: str | None = None
    scaling_group_replica: int | None = None
    breached_cliques: tuple[str, ...] = Field(description="the breached PodCliques behind this clock")
    breach_start: AwareDatetime
    delay: timedelta
    due_at: AwareDatetime
    cause: str = Field(description="human sentence: what is breached, since when")


class Termination(_Frozen):
    """A gang termination to carry out now."""

    scope: Scope
    scaling_group: str | None = None
    scaling_group_replica: int | None = None
    cliques: tuple[str, ...] = Field(description="every PodClique to delete (then recreate)")
    causes: tuple[Deadline, ...] = Field(default=(), description="the expired deadlines; empty when forced")
    breach_start: AwareDatetime | None = Field(description="of the first-expired cause; None when forced")
    delay: timedelta | None = Field(description="of the first-expired cause; None when forced")
    deadline: AwareDatetime = Field(description="when it became due (the request time when forced)")
    forced: bool = False
    reason: str

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(c.target for c in self.causes)

    @property
    def breached_cliques(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(name for c in self.causes for name in c.breached_cliques))


class TerminationPlan(_Frozen):
    deadlines: tuple[Deadline, ...] = Field(default=(), description="pending (not yet due), earliest first")
    terminations: tuple[Termination, ...] = ()

    @property
    def next_deadline(self) -> datetime | None:
        return self.deadlines[0].due_at if self.deadlines else None


def plan_terminations(
    topology: ReplicaTopology,
    cliques: Mapping[str, CliqueHealth],
    scaling_groups: Mapping[str, ScalingGroupHealth],
    now: datetime,
) -> TerminationPlan:
    now = as_utc(now)
    if topology.termination_delay is None:
        return TerminationPlan()
    clocks = [
        *_pcs_replica_deadlines(topology, cliques, scaling_groups),
        *_pcsg_replica_deadlines(topology, cliques, scaling_groups),
    ]
    due = sorted((d for d in clocks if d.due_at <= now), key=_order)
    pending = tuple(sorted((d for d in clocks if d.due_at > now), key=_order))
    whole_replica = [d for d in due if d.scope is Scope.PCS_REPLICA]
    if whole_replica:
        return TerminationPlan(
            deadlines=pending, terminations=(_pcs_replica_termination(topology, whole_replica),)
        )
    return TerminationPlan(
        deadlines=pending, terminations=tuple(_pcsg_replica_termination(topology, d) for d in due)
    )


def forced_termination(
    topology: ReplicaTopology,
    now: datetime,
    reason: str,
    scaling_group: str | None = None,
    scaling_group_replica: int | None = None,
) -> Termination:
    """An operator's force-terminate (DESIGN §4.7): no delay, no breach needed. Raises ValueError, naming what is
    wrong, when the request names something this replica does not have."""
    now = as_utc(now)
    if scaling_group is None:
        if scaling_group_replica is not None:
            raise ValueError("scaling_group_replica given without scaling_group")
        return Termination(
            scope=Scope.PCS_REPLICA,
            cliques=tuple(c.name for c in topology.cliques),
            breach_start=None,
            delay=None,
            deadline=now,
            forced=True,
            reason=f"{_pcs_scope_phrase(topology)}: forced by operator: {reason}",
        )
    names = [g.name for g in topology.scaling_groups]
    if scaling_group not in names:
        raise ValueError(
            f"PodCliqueScalingGroup {scaling_group!r} does not exist in replica {topology.replica} "
            f"(have: {', '.join(names) or 'none'})"
        )
    replicas = topology.scaling_group(scaling_group).replicas
    if scaling_group_replica is None or not 0 <= scaling_group_replica < replicas:
        raise ValueError(
            f"PodCliqueScalingGroup {scaling_group!r} has replicas 0..{replicas - 1}, not {scaling_group_replica}"
        )
    members = tuple(c.name for c in topology.members(scaling_group, scaling_group_replica))
    return Termination(
        scope=Scope.PCSG_REPLICA,
        scaling_group=scaling_group,
        scaling_group_replica=scaling_group_replica,
        cliques=members,
        breach_start=None,
        delay=None,
        deadline=now,
        forced=True,
        reason=f"{_pcsg_scope_phrase(scaling_group, scaling_group_replica, members)}: forced by operator: {reason}",
    )


def _order(deadline: Deadline) -> tuple[datetime, str]:
    return deadline.due_at, deadline.target


def _pcs_replica_deadlines(
    topology: ReplicaTopology,
    cliques: Mapping[str, CliqueHealth],
    scaling_groups: Mapping[str, ScalingGroupHealth],
) -> Iterator[Deadline]:
    pcs_delay = topology.termination_delay
    assert pcs_delay is not None
    for unit in topology.standalone():
        health = cliques[unit.name]
        if health.breach_start is None:
            continue
        yield Deadline(
            scope=Scope.PCS_REPLICA,
            target=unit.name,
            breached_cliques=(unit.name,),
            breach_start=health.breach_start,
            delay=pcs_delay,
            due_at=health.breach_start + pcs_delay,
            cause=_clique_cause(unit.name, health),
        )
    for group in topology.scaling_groups:
        verdict = scaling_groups[group.name]
        delay = topology.effective_delay(group.name)
        if verdict.breach_start is None or delay is None:
            continue
        breached = tuple(
            c.name
            for j in verdict.breached_replicas
            for c in topology.members(group.name, j)
            if cliques[c.name].condition.breached
        )
        yield Deadline(
            scope=Scope.PCS_REPLICA,
            target=group.name,
            breached_cliques=breached,
            breach_start=verdict.breach_start,
            delay=delay,
            due_at=verdict.breach_start + delay,
            cause=f"PodCliqueScalingGroup {group.name} had {verdict.healthy_replicas} of {verdict.min_available} "
            f"required replicas healthy since {clock(verdict.breach_start)} (breached: {', '.join(breached)})",
        )


def _pcsg_replica_deadlines(
    topology: ReplicaTopology,
    cliques: Mapping[str, CliqueHealth],
    scaling_groups: Mapping[str, ScalingGroupHealth],
) -> Iterator[Deadline]:
    for group in topology.scaling_groups:
        verdict = scaling_groups[group.name]
        delay = topology.effective_delay(group.name)
        if verdict.condition.breached or delay is None:
            continue  # breached as a whole: the PCS-replica clock decides, PCSG-replica clocks are suspended
        for j in verdict.breached_replicas:
            breached = [
                (start, c.name)
                for c in topology.members(group.name, j)
                if (start := cliques[c.name].breach_start) is not None
            ]
            start, first = min(breached)
            others = [name for _, name in sorted(breached)[1:]]
            also = f" (also breached: {', '.join(others)})" if others else ""
            yield Deadline(
                scope=Scope.PCSG_REPLICA,
                target=f"{group.name}-{j}",
                scaling_group=group.name,
                scaling_group_replica=j,
                breached_cliques=tuple(name for _, name in sorted(breached)),
                breach_start=start,
                delay=delay,
                due_at=start + delay,
                cause=f"{_clique_cause(first, cliques[first])}{also}",
            )


def _pcs_replica_termination(topology: ReplicaTopology, causes: list[Deadline]) -> Termination:
    first = causes[0]
    return Termination(
        scope=Scope.PCS_REPLICA,
        cliques=tuple(c.name for c in topology.cliques),
        causes=tuple(causes),
        breach_start=first.breach_start,
        delay=first.delay,
        deadline=first.due_at,
        reason=f"{_pcs_scope_phrase(topology)}: {'; '.join(_expiry(d) for d in causes)}",
    )


def _pcsg_replica_termination(topology: ReplicaTopology, cause: Deadline) -> Termination:
    assert cause.scaling_group is not None and cause.scaling_group_replica is not None
    members = tuple(c.name for c in topology.members(cause.scaling_group, cause.scaling_group_replica))
    return Termination(
        scope=Scope.PCSG_REPLICA,
        scaling_group=cause.scaling_group,
        scaling_group_replica=cause.scaling_group_replica,
        cliques=members,
        causes=(cause,),
        breach_start=cause.breach_start,
        delay=cause.delay,
        deadline=cause.due_at,
        reason=f"{_pcsg_scope_phrase(cause.scaling_group, cause.scaling_group_replica, members)}: {_expiry(cause)}",
    )


def _pcs_scope_phrase(topology: ReplicaTopology) -> str:
    return (
        f"Gang-terminating PodCliqueSet {topology.pcs} replica {topology.replica} "
        f"(all {len(topology.cliques)} PodCliques)"
    )


def _pcsg_scope_phrase(scaling_group: str, replica: int, members: tuple[str, ...]) -> str:
    return f"Gang-terminating PodCliqueScalingGroup {scaling_group} replica {replica} ({', '.join(members)})"


def _clique_cause(name: str, health: CliqueHealth) -> str:
    assert health.breach_start is not None
    return (
        f"PodClique {name} had {health.ready} of {health.min_available} required pods ready "
        f"since {clock(health.breach_start)}"
    )


def _expiry(deadline: Deadline) -> str:
    return (
        f"{deadline.cause}; terminationDelay {format_duration(deadline.delay)} expired at {clock(deadline.due_at)}"
    )


def as_utc(moment: datetime) -> datetime:
    """Decisions take time from the caller (workflow time), never from the wall clock; it must say its timezone."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError("time must be a timezone-aware datetime (UTC)")
    return moment.astimezone(UTC)


def clock(moment: datetime) -> str:
    """UTC, to the second (milliseconds only when present), e.g. 2025-06-01T12:00:03Z."""
    moment = moment.astimezone(UTC)
    millis = f".{moment.microsecond // 1000:03d}" if moment.microsecond else ""
    return f"{moment:%Y-%m-%dT%H:%M:%S}{millis}Z"
