"""One evaluation of one PCS replica: observation + memory + now -> verdicts, plan and the next memory.

The replica workflow keeps `ReplicaMemory` in its state (and carries it across continue-as-new); this module is
the only place that advances it. Everything is a pure function of its arguments: no clock, no randomness, no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import datetime

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from grove.availability import (
    CliqueHealth,
    CliqueObservation,
    ScalingGroupHealth,
    clique_condition,
    reaches_availability,
    replica_available,
    scaling_group_health,
)
from grove.termination import Deadline, Scope, Termination, as_utc, plan_terminations
from grove.topology import ReplicaTopology


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ReplicaObservation(_Frozen):
    """Fresh state of one replica, read by an activity. PodCliques that do not exist or carry a deletionTimestamp
    are left out: they count as absent (never available, not breached)."""

    cliques: dict[str, CliqueObservation] = Field(default_factory=dict, description="by PCLQ name")


class ReplicaMemory(_Frozen):
    """What the workflow must remember between evaluations (Grove keeps it in status fields)."""

    was_available: dict[str, str] = Field(
        default_factory=dict, description="PCLQ name -> the UID of the incarnation that reached minAvailable"
    )
    clique_breach_starts: dict[str, AwareDatetime] = Field(
        default_factory=dict, description="PCLQ name -> start"
    )
    scaling_group_breach_starts: dict[str, AwareDatetime] = Field(
        default_factory=dict, description="PCSG name -> start of its breach as a whole"
    )
    terminated: dict[str, str] = Field(
        default_factory=dict,
        description="PCLQ name -> UID of an incarnation we gang-terminated; a lagging read of it counts as absent",
    )


class ReplicaEvaluation(_Frozen):
    memory: ReplicaMemory = Field(description="the memory to keep for the next evaluation")
    cliques: dict[str, CliqueHealth] = Field(
        description="by PCLQ name; condition to mirror on each PodClique"
    )
    scaling_groups: dict[str, ScalingGroupHealth] = Field(
        description="by PCSG name; condition and counts to mirror"
    )
    replica_available: bool
    deadlines: tuple[Deadline, ...] = Field(description="pending, earliest first; all due strictly after due_by")
    terminations: tuple[Termination, ...] = Field(
        description="due now; carry out, then call forget_terminated"
    )

    @property
    def next_deadline(self) -> datetime | None:
        """When to set the one durable timer; None when nothing is pending."""
        return self.deadlines[0].due_at if self.deadlines else None


def evaluate_replica(
    topology: ReplicaTopology, observed: ReplicaObservation, memory: ReplicaMemory, now: datetime,
    due_by: datetime | None = None,
) -> ReplicaEvaluation:
    """`now` stamps breaches first seen; a deadline is due when it is at or before `due_by` (default: `now`)."""
    now = as_utc(now)
    was_available: dict[str, str] = {}
    terminated: dict[str, str] = {}
    clique_starts: dict[str, datetime] = {}
    cliques: dict[str, CliqueHealth] = {}
    for unit in topology.cliques:
        seen = observed.cliques.get(unit.name)
        tombstone = memory.terminated.get(unit.name)
        if seen is not None and seen.uid == tombstone:
            seen = None  # already deleted by us; its breach was acted on once and must not count again
        if tombstone is not None and seen is None:
            terminated[unit.name] = tombstone
        remembered = memory.was_available.get(unit.name)
        if reaches_availability(unit, seen):
            assert seen is not None
            remembered = seen.uid
        elif seen is not None and remembered != seen.uid:
            remembered = None  # recreated: the old incarnation's bit does not carry over
        if remembered is not None:
            was_available[unit.name] = remembered
        is_available_incarnation = seen is not None and remembered == seen.uid
        condition = clique_condition(unit, seen, is_available_incarnation)
        start = _breach_start(memory.clique_breach_starts.get(unit.name), condition.breached, now)
        if start is not None:
            clique_starts[unit.name] = start
        cliques[unit.name] = CliqueHealth(
            condition=condition,
            present=seen is not None,
            ready=seen.ready if seen is not None else 0,
            min_available=unit.min_available,
            was_available=is_available_incarnation,
            breach_start=start,
        )

    group_starts: dict[str, datetime] = {}
    groups: dict[str, ScalingGroupHealth] = {}
    for group in topology.scaling_groups:
        members = {
            j: tuple(cliques[c.name] for c in topology.members(group.name, j)) for j in range(group.replicas)
        }
        health = scaling_group_health(group, members)
        start = _breach_start(
            memory.scaling_group_breach_starts.get(group.name), health.condition.breached, now
        )
        if start is not None:
            group_starts[group.name] = start
            health = health.model_copy(update={"breach_start": start})
        groups[group.name] = health

    plan = plan_terminations(topology, cliques, groups, now if due_by is None else due_by)
    return ReplicaEvaluation(
        memory=ReplicaMemory(
            was_available=was_available,
            clique_breach_starts=clique_starts,
            scaling_group_breach_starts=group_starts,
            terminated=terminated,
        ),
        cliques=cliques,
        scaling_groups=groups,
        replica_available=replica_available(
            tuple(cliques[c.name] for c in topology.standalone()), tuple(groups.values())
        ),
        deadlines=plan.deadlines,
        terminations=plan.terminations,
    )


def remember_reached(memory: ReplicaMemory, observed: ReplicaObservation,
                     reached: Mapping[str, str]) -> tuple[ReplicaMemory, dict[str, str]]:
    """Take PodCliques the watcher saw at or past minAvailable (PCLQ name -> UID) as having reached it, where this
    observation shows that very incarnation outside a rolling update: a Ready that was gained and lost between two
    reads still set the sticky bit (DESIGN §4.4: "the first time ready >= minAvailable"). Returns the memory and what
    is left for a later observation: the PodCliques this one does not show (a read that lags the watcher). One it
    shows under another UID is dropped: that report is of another incarnation."""
    was_available = dict(memory.was_available)
    left: dict[str, str] = {}
    for name, uid in reached.items():
        seen = observed.cliques.get(name)
        if seen is None:
            left[name] = uid
        elif seen.uid == uid and not seen.update_in_progress and memory.terminated.get(name) != uid:
            was_available[name] = uid
    if was_available == memory.was_available:
        return memory, left
    return memory.model_copy(update={"was_available": was_available}), left


def forget_terminated(memory: ReplicaMemory, termination: Termination) -> ReplicaMemory:
    """The memory after `termination` was carried out: its PodCliques start a new incarnation (never available, no
    breach) and the breach clocks of the scopes it covered are stopped, so one expired breach can never cause a
    second termination. The UIDs of the deleted incarnations we knew are kept as tombstones, so a lagging read that
    still shows a deleted PodClique cannot make it available (and then breached) again."""
    gone = set(termination.cliques)
    groups_cleared = _groups_covered(memory, termination)
    return ReplicaMemory(
        was_available={k: v for k, v in memory.was_available.items() if k not in gone},
        clique_breach_starts={k: v for k, v in memory.clique_breach_starts.items() if k not in gone},
        scaling_group_breach_starts={
            k: v for k, v in memory.scaling_group_breach_starts.items() if k not in groups_cleared
        },
        terminated={
            **{k: v for k, v in memory.terminated.items() if k not in gone},
            **{k: v for k, v in memory.was_available.items() if k in gone},
        },
    )


def forget_healed(memory: ReplicaMemory, termination: Termination) -> ReplicaMemory:
    """The memory after a termination was not carried out because a later read showed its breach healed: the breach
    clocks it covered are stopped, as a read showing the heal would have stopped them, so a breach seen again starts
    a new clock instead of being due at once on the old one. Incarnations and their availability are kept."""
    gone = set(termination.cliques)
    groups_cleared = _groups_covered(memory, termination)
    return memory.model_copy(update={
        "clique_breach_starts": {k: v for k, v in memory.clique_breach_starts.items() if k not in gone},
        "scaling_group_breach_starts": {
            k: v for k, v in memory.scaling_group_breach_starts.items() if k not in groups_cleared},
    })


def _groups_covered(memory: ReplicaMemory, termination: Termination) -> set[str]:
    """The PCSGs whose breach clocks `termination` covers: every one for a PCS replica, else its own PCSG."""
    if termination.scope is Scope.PCS_REPLICA:
        return set(memory.scaling_group_breach_starts)
    return {termination.scaling_group} if termination.scaling_group else set()


def _breach_start(previous: datetime | None, breached: bool, now: datetime) -> datetime | None:
    """A breach begins at the transition to True and lasts while True; anything else heals it. A reason or message
    change while True is not a transition, so the clock keeps running."""
    if not breached:
        return None
    return previous if previous is not None else now


def still_due(topology: ReplicaTopology, observed: ReplicaObservation, memory: ReplicaMemory, due_by: datetime,
              cliques: Collection[str]) -> bool:
    """Whether a later read still makes a termination of `cliques` due, judged as the workflow judged it: `memory`
    is the one the decision was made with, `due_by` the deadline that fell due. A breach the read no longer shows
    has healed; one it shows anew starts at `due_by` and is not due yet; a PodClique replaced meanwhile is a new
    incarnation, never breached. A due termination of a larger scope that covers `cliques` counts (the PCS replica
    breached as a whole while a PCSG replica's termination waited)."""
    again = evaluate_replica(topology, observed, memory, now=due_by, due_by=due_by)
    wanted = set(cliques)
    return any(wanted <= set(termination.cliques) for termination in again.terminations)
