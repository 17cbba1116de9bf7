"""Pure helpers of the replica workflow: from a snapshot and an evaluation to the status mirror, the phase, the
search attributes, the status query answer and the markdown the Temporal UI shows. No I/O, no clock: safe in
workflow code.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping
from typing import Any

from temporalio.common import SearchAttributeUpdate

from grove import names
from grove.availability import CliqueObservation
from grove.durations import format_duration
from grove.evaluate import ReplicaEvaluation, ReplicaObservation, evaluate_replica
from grove.release import CliqueGateState, GateDecision
from grove.rollout import CliqueProgress
from grove.startup import CliqueStartupState, StartupDecision
from grove.termination import clock
from grove.topology import ReplicaTopology
from workflows.contract import GROVE_PAUSED, GROVE_PHASE
from workflows.messages import (
    CliqueState,
    CliqueStatus,
    ConditionMirror,
    DeadlineMemo,
    DeadlineStatus,
    MirroredWithRead,
    MirrorWithRead,
    ObjectStatusMirror,
    Phase,
    ReplicaRef,
    ReplicaSnapshot,
    ReplicaState,
    ReplicaStatus,
    TerminationRecord,
)
from workflows.rollout_messages import RolloutView
from workflows.signals import Received

MAX_DETAIL_ROWS = 24


def observation(snapshot: ReplicaSnapshot, updating: frozenset[str] = frozenset()) -> ReplicaObservation:
    return observation_of(snapshot.cliques, updating)


def observation_of(cliques: Mapping[str, CliqueState], updating: Collection[str] = ()) -> ReplicaObservation:
    """What the decisions see: PodCliques being deleted count as absent; `updating` are under a rolling update. The
    workflow's rounds and terminate_gang's recheck (activities/replica.py) see a read the same way."""
    return ReplicaObservation(cliques={
        name: CliqueObservation(
            uid=state.uid, ready=state.ready, scheduled=state.scheduled, gated=state.gated, pods=state.pods,
            update_in_progress=name in updating,
        )
        for name, state in cliques.items()
        if not state.terminating
    })


def gate_states(snapshot: ReplicaSnapshot) -> dict[str, CliqueGateState]:
    return {
        name: CliqueGateState(scheduled=state.scheduled, ready=state.ready, releasable=tuple(sorted(state.releasable)))
        for name, state in snapshot.cliques.items()
        if not state.terminating
    }


def startup_states(snapshot: ReplicaSnapshot) -> dict[str, CliqueStartupState]:
    return {
        name: CliqueStartupState(pods=state.pods, ready=state.ready, waiting=tuple(sorted(state.startup_waiting)))
        for name, state in snapshot.cliques.items()
        if not state.terminating
    }


def startup_lines(decision: StartupDecision | None, snapshot: ReplicaSnapshot | None,
                  topology: ReplicaTopology | None) -> tuple[str, ...]:
    """'p-0-decode waits for p-0-prefill Ready (1/2)' per PodClique still held by its startup order."""
    if decision is None or snapshot is None or topology is None:
        return ()
    ready = {unit.name: (snapshot.cliques[unit.name].ready if unit.name in snapshot.cliques else 0, unit.replicas)
             for unit in topology.cliques}
    return decision.lines(ready)


def status_mirrors(
    topology: ReplicaTopology, snapshot: ReplicaSnapshot, evaluation: ReplicaEvaluation
) -> list[ObjectStatusMirror]:
    mirrors: list[ObjectStatusMirror] = []
    scheduled_ok: dict[str, bool] = {}
    for unit in topology.cliques:
        state = snapshot.cliques.get(unit.name)
        health = evaluation.cliques.get(unit.name)
        if state is None or state.terminating or health is None:
            continue
        scheduled_ok[unit.name] = state.scheduled >= unit.min_available
        condition = health.condition
        mirrors.append(
            ObjectStatusMirror(
                kind=names.KIND_PODCLIQUE,
                name=unit.name,
                uid=state.uid,
                fields={
                    "replicas": state.pods,
                    "readyReplicas": state.ready,
                    "scheduledReplicas": state.scheduled,
                    "scheduleGatedReplicas": state.gated,
                    **rollout_fields(state),
                },
                texts=rollout_texts(state),
                conditions=(
                    ConditionMirror(
                        type=names.CONDITION_MIN_AVAILABLE_BREACHED,
                        status=condition.status.value,
                        reason=condition.reason.value,
                        message=condition.message,
                    ),
                    ConditionMirror(
                        type=names.CONDITION_PODCLIQUE_SCHEDULED,
                        status="True" if scheduled_ok[unit.name] else "False",
                        reason=(
                            names.REASON_SUFFICIENT_SCHEDULED_PODS
                            if scheduled_ok[unit.name]
                            else names.REASON_INSUFFICIENT_SCHEDULED_PODS
                        ),
                        message=f"{state.scheduled} of {unit.min_available} required pods scheduled",
                    ),
                ),
            )
        )
    for group in topology.scaling_groups:
        group_health = evaluation.scaling_groups.get(group.name)
        if group_health is None:
            continue
        scheduled = sum(
            1
            for j in range(group.replicas)
            if (members := topology.members(group.name, j)) and all(scheduled_ok.get(m.name, False) for m in members)
        )
        mirrors.append(
            ObjectStatusMirror(
                kind=names.KIND_PODCLIQUESCALINGGROUP,
                name=group.name,
                fields={
                    "replicas": group.replicas,
                    "scheduledReplicas": scheduled,
                    "availableReplicas": group_health.available_replicas,
                    **scaling_group_rollout_fields(topology, snapshot, group.name, group.replicas),
                },
                conditions=(
                    ConditionMirror(
                        type=names.CONDITION_MIN_AVAILABLE_BREACHED,
                        status=group_health.condition.status.value,
                        reason=group_health.condition.reason.value,
                        message=group_health.condition.message,
                    ),
                ),
            )
        )
    return mirrors


def rollout_progress(cliques: Mapping[str, CliqueState]) -> dict[str, CliqueProgress]:
    """What grove.rollout needs of each PodClique."""
    return {
        name: CliqueProgress(uid=s.uid, terminating=s.terminating, pods=s.pods, ready=s.ready, outdated=s.outdated,
                             outdated_ready=s.outdated_ready, updated_ready=s.updated_ready)
        for name, s in cliques.items()
    }


def rollout_fields(state: CliqueState) -> dict[str, int]:
    """PCLQ status.updatedReplicas: live pods at the current template (only with a snapshot that knows it, so the
    mirror of a history recorded before rolling updates existed stays the same)."""
    return {"updatedReplicas": state.pods - len(state.outdated)} if state.target_hash else {}


def rollout_texts(state: CliqueState) -> dict[str, str]:
    """PCLQ status.currentPodTemplateHash: the template every live pod runs, once none runs another."""
    return {"currentPodTemplateHash": state.target_hash} if state.target_hash and not state.outdated else {}


def scaling_group_rollout_fields(topology: ReplicaTopology, snapshot: ReplicaSnapshot, group: str,
                                 replicas: int) -> dict[str, int]:
    """PCSG status.updatedReplicas: replicas whose PodCliques all exist and run only the current template."""
    states = [[snapshot.cliques.get(m.name) for m in topology.members(group, j)] for j in range(replicas)]
    if not any(s is not None and s.target_hash for members in states for s in members):
        return {}
    updated = sum(1 for members in states
                  if members and all(s is not None and not s.terminating and not s.outdated for s in members))
    return {"updatedReplicas": updated}


def current_breaches(evaluation: ReplicaEvaluation) -> dict[str, tuple[str, str]]:
    """Breached PodCliques and PCSGs now: name -> (breach start as text, a sentence for an Event)."""
    found: dict[str, tuple[str, str]] = {}
    breached = [(name, h.condition.message, h.breach_start) for name, h in evaluation.cliques.items()
                if h.condition.breached and h.breach_start is not None]
    breached += [(name, h.condition.message, h.breach_start) for name, h in evaluation.scaling_groups.items()
                 if h.condition.breached and h.breach_start is not None]
    for name, message, start in breached:
        assert start is not None
        deadline = next((d for d in evaluation.deadlines if name in d.breached_cliques or d.target == name), None)
        then = (f"{deadline.scope.value} gang termination due {clock(deadline.due_at)} unless it heals"
                if deadline is not None else "no termination pending (terminationDelay unset or already due)")
        found[name] = (clock(start), f"{name} breached since {clock(start)}: {message}; {then}")
    return found


def changed_mirrors(topology: ReplicaTopology, snapshot: ReplicaSnapshot, evaluation: ReplicaEvaluation,
                    mirrored: Mapping[str, str]) -> tuple[ObjectStatusMirror, ...]:
    """The status mirrors whose digest differs from what was last mirrored (`mirrored`: name -> digest): what a
    round writes, whether the read writes it (`mirrors_with_read`) or the round's own mirror_status."""
    return tuple(item for item in status_mirrors(topology, snapshot, evaluation)
                 if mirrored.get(item.name) != digest(item))


def mirrors_with_read(plan: MirrorWithRead, snapshot: ReplicaSnapshot,
                      replica: int) -> tuple[tuple[ObjectStatusMirror, ...], bool, MirroredWithRead] | None:
    """What a read asked to mirror (MIRROR_WITH_READ_PATCH) writes: the objects whose status changed, whether the
    PCS's availability changed, and the record of both. None where the round will not evaluate this very read: an
    invalid spec, something to materialise, a replica no longer wanted. The workflow's own evaluation and digests, on
    the memory it sent and at the time its round decides at (the later of its decision time and the read's)."""
    if not snapshot.valid or snapshot.drift or replica >= snapshot.wanted_replicas or snapshot.topology is None:
        return None
    evaluation = evaluate_replica(snapshot.topology, observation(snapshot), plan.memory,
                                  max(plan.decided_at, snapshot.read_at), plan.due_by)
    changed = changed_mirrors(snapshot.topology, snapshot, evaluation, plan.mirrored)
    return (changed, evaluation.replica_available != plan.replica_available,
            MirroredWithRead(digests={item.name: digest(item) for item in changed},
                             replica_available=evaluation.replica_available))


def digest(mirror: ObjectStatusMirror) -> str:
    """A stable fingerprint, so unchanged objects are not written again."""
    data = mirror.model_dump(mode="json")
    if not data.get("texts"):
        data.pop("texts", None)  # the fingerprint of a mirror without string fields is what it was before them
    blob = json.dumps(data, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def clique_statuses(
    topology: ReplicaTopology, snapshot: ReplicaSnapshot, evaluation: ReplicaEvaluation
) -> tuple[CliqueStatus, ...]:
    rows = []
    for unit in topology.cliques:
        state = snapshot.cliques.get(unit.name)
        health = evaluation.cliques.get(unit.name)
        if health is None:  # topology changed since this evaluation
            continue
        live = state is not None and not state.terminating
        rows.append(
            CliqueStatus(
                name=unit.name,
                present=live,
                pods=state.pods if live and state else 0,
                ready=state.ready if live and state else 0,
                scheduled=state.scheduled if live and state else 0,
                gated=state.gated if live and state else 0,
                min_available=unit.min_available,
                was_available=health.was_available,
                breached=health.condition.status.value,
                reason=health.condition.reason.value,
                breach_start=health.breach_start,
            )
        )
    return tuple(rows)


def deadline_statuses(evaluation: ReplicaEvaluation) -> tuple[DeadlineStatus, ...]:
    return tuple(
        DeadlineStatus(
            scope=d.scope,
            target=d.target,
            breach_start=d.breach_start,
            delay=d.delay,
            due_at=d.due_at,
            cause=d.cause,
        )
        for d in evaluation.deadlines
    )


def details_markdown(
    *,
    phase: str,
    paused: bool,
    pause_reason: str,
    incarnation: int,
    problems: tuple[str, ...],
    cliques: tuple[CliqueStatus, ...],
    deadlines: tuple[DeadlineStatus, ...],
    gates: GateDecision | None,
    startup: tuple[str, ...] = (),
    last_termination: TerminationRecord | None,
    terminations_total: int,
    rollout: str = "",
    held: tuple[str, ...] = (),
) -> str:
    """The 'current details' of the replica workflow in the Temporal UI: short, scannable at 3 a.m."""
    head = f"**{phase}** · incarnation {incarnation} · terminations {terminations_total}"
    if paused:
        head += f" · **PAUSED**{': ' + pause_reason if pause_reason else ''}"
    lines = [head, ""]
    if problems:
        lines += ["**Spec problems** (nothing is created or deleted until fixed):", ""]
        lines += [f"- `{p}`" for p in problems[:MAX_DETAIL_ROWS]]
        lines.append("")
    if rollout:
        lines += [rollout, ""]
    if gates is not None and not gates.base_gang_ready:
        lines += [f"Base gang `{gates.base_gang}` waiting for: {', '.join(gates.waiting_for)}", ""]
    if startup:
        lines += ["**Startup order**", ""] + [f"- {line}" for line in startup[:MAX_DETAIL_ROWS]] + [""]
    if cliques:
        lines += ["| PodClique | ready/min | scheduled | gated | was available | breached |", "|---|---|---|---|---|---|"]
        for row in cliques[:MAX_DETAIL_ROWS]:
            breach = row.breached if row.breached != "False" else "no"
            if row.breached != "False" or row.reason != names.REASON_SUFFICIENT_READY_PODS:
                breach += f" ({row.reason})"
            lines.append(
                f"| {row.name} | {row.ready}/{row.min_available} | {row.scheduled} | {row.gated} | "
                f"{'yes' if row.was_available else 'no'} | {breach} |"
            )
        if len(cliques) > MAX_DETAIL_ROWS:
            lines.append(f"| … {len(cliques) - MAX_DETAIL_ROWS} more | | | | | |")
        lines.append("")
    if deadlines:
        lines += ["**Pending terminationDelay deadlines**", "", "| scope | target | due | cause |", "|---|---|---|---|"]
        lines += [f"| {d.scope.value} | {d.target} | {clock(d.due_at)} | {d.cause} |" for d in deadlines[:8]]
        lines.append("")
    if held:
        lines += [f"**Due, held ({'paused' if paused else 'spec invalid'})**", ""]
        lines += [f"- {reason}" for reason in held[:8]]
        lines.append("")
    if last_termination is not None:
        t = last_termination
        what = t.scope.value + (f" {t.scaling_group}[{t.scaling_group_replica}]" if t.scaling_group else "")
        lines.append(f"Last termination at {clock(t.at)}: {what} — {t.reason}")
    return "\n".join(lines).strip()


def timer_summary(deadlines: tuple[DeadlineStatus, ...]) -> str:
    first = deadlines[0]
    return f"terminationDelay {format_duration(first.delay)}: {first.scope.value} {first.target} due {clock(first.due_at)}"


# --- the replica workflow's phase, search attributes and status answer ----------------------------------------------
def phase_of(snapshot: ReplicaSnapshot, evaluation: ReplicaEvaluation, gates: GateDecision | None,
             held: bool) -> Phase:
    """The phase a round ends in (when it terminates nothing); `held`: the spec is invalid."""
    if held:
        return Phase.INVALID
    if evaluation.deadlines or evaluation.terminations or current_breaches(evaluation):
        return Phase.BREACHED  # counting down, held (paused/invalid), or breached with termination off
    if snapshot.drift or any(not h.present for h in evaluation.cliques.values()):
        return Phase.CREATING
    if gates is not None and not gates.base_gang_ready:
        return Phase.SCHEDULING
    if evaluation.replica_available and all(h.available for h in evaluation.cliques.values()):
        return Phase.AVAILABLE
    return Phase.STARTING


class SearchAttributeMirror:
    """The phase and pause last written to the workflow's search attributes (this run): only changes are written."""

    def __init__(self) -> None:
        self.phase: str | None = None
        self.paused: bool | None = None

    def updates(self, phase: Phase, paused: bool) -> list[SearchAttributeUpdate[Any]]:
        updates: list[SearchAttributeUpdate[Any]] = []
        if self.phase != phase.value:
            updates.append(GROVE_PHASE.value_set(phase.value))
            self.phase = phase.value
        if self.paused != paused:
            updates.append(GROVE_PAUSED.value_set(paused))
            self.paused = paused
        return updates


# The phases in which a replica can hold a terminationDelay deadline (a breach begins one): the fleet gauges list
# these, and a replica in one of them always has its deadlines in its memo (deadline_memo_update).
DEADLINE_PHASES = (Phase.BREACHED, Phase.TERMINATING)


def pending_deadlines(state: ReplicaState, snapshot: ReplicaSnapshot | None,
                      evaluation: ReplicaEvaluation | None) -> tuple[DeadlineStatus, ...]:
    """The deadlines the status query shows: those of the last round's evaluation, once the replica has a plan."""
    if state.topology is None or snapshot is None or evaluation is None:
        return ()
    return deadline_statuses(evaluation)


def deadline_memo(deadlines: tuple[DeadlineStatus, ...]) -> DeadlineMemo:
    return DeadlineMemo(count=len(deadlines), next_due=min((d.due_at for d in deadlines), default=None))


def deadline_memo_update(current: DeadlineMemo | None, deadlines: tuple[DeadlineStatus, ...],
                         phase: Phase) -> DeadlineMemo | None:
    """What to write to the replica's deadline memo, or None when it already says so. A replica that never had a
    deadline and is in no deadline phase writes nothing: most replicas never breach, and each write is an event."""
    wanted = deadline_memo(deadlines)
    if wanted == current or (current is None and not wanted.count and phase not in DEADLINE_PHASES):
        return None
    return wanted


def replica_status(ref: ReplicaRef, state: ReplicaState, *, snapshot: ReplicaSnapshot | None,
                   evaluation: ReplicaEvaluation | None, gates: GateDecision | None,
                   startup: StartupDecision | None, problems: tuple[str, ...], held: bool,
                   rejected: tuple[str, ...], rollout: RolloutView | None, received: Received,
                   counted: int) -> ReplicaStatus:
    """The status query answer. `held`: the spec is invalid; `received`: the messages this run received;
    `counted`: its history length as it counts it."""
    cliques: tuple[CliqueStatus, ...] = ()
    if state.topology is not None and snapshot is not None and evaluation is not None:
        cliques = clique_statuses(state.topology, snapshot, evaluation)
    deadlines = pending_deadlines(state, snapshot, evaluation)
    return ReplicaStatus(
        ref=ref, phase=state.phase, paused=state.paused, pause_reason=state.pause_reason,
        incarnation=state.incarnation, problems=problems, cliques=cliques, deadlines=deadlines,
        base_gang_ready=bool(gates and gates.base_gang_ready),
        waiting_for=gates.waiting_for if gates else (),
        terminations=tuple(state.terminations), terminations_total=state.terminations_total,
        held=tuple(t.reason for t in evaluation.terminations) if evaluation and (state.paused or held) else (),
        rejected=rejected,
        observed_at=snapshot.read_at if snapshot else None, runs=state.runs,
        startup=startup_lines(startup, snapshot, state.topology),
        rollout=rollout,
        nudges=received.nudges, signals=received.signals, updates=received.updates,
        history_events_counted=counted,
        nudges_total=state.nudges_total,
        scheduler_backend=snapshot.scheduler_backend if snapshot else None,
    )
