"""Rolling updates (DESIGN §4.9; Grove's `spec.updateStrategy` and per-component `rollingUpdate`).

Pure: hashes of pod templates, validation of the update fields, and the decisions of a RollingRecreate rollout:
- inside one PCS replica (`replica_step`): which pods of standalone PodCliques and which whole PCSG replicas to
  recreate next within their maxUnavailable, which PodCliques are being updated, when the replica's turn is done;
- across the PCS (`next_replica`): which replica's turn comes next (unavailable replicas first, then by index);
- progressDeadline (`advance_progress`): which component has shown no progress for longer than its deadline.

Fields whose change needs new pods (the pod template hash covers exactly these, per clique, as Grove's
`ComputePCLQPodTemplateHash` does): the clique template's `labels`, `annotations` and `spec.podSpec`, and the PCS
template's `priorityClassName`. The generation hash covers the pod template hashes of every clique. Anything else
(replica counts, minAvailable, terminationDelay, scaling groups, rollingUpdate itself, ...) updates no pod.
The values are our own (sha256 of canonical JSON), not byte-equal to Grove's (a Go struct hash).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from grove import names
from grove.models import PodCliqueSet, PodCliqueTemplateSpec
from grove.problems import Problem
from grove.topology import ReplicaTopology

HASH_LENGTH = 10


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# --- Hashes ------------------------------------------------------------------------------------------------
def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:HASH_LENGTH]


def pod_template_hash(pcs: PodCliqueSet, clique: PodCliqueTemplateSpec) -> str:
    """The hash of what a pod of this clique is made from (see the module docstring for the fields)."""
    return _digest({
        "labels": clique.labels or {},
        "annotations": clique.annotations or {},
        "podSpec": clique.spec.pod_spec,
        "priorityClassName": pcs.spec.template.priority_class_name or "",
    })


def pod_template_hashes(pcs: PodCliqueSet) -> dict[str, str]:
    """Clique template name -> pod template hash."""
    return {clique.name: pod_template_hash(pcs, clique) for clique in pcs.spec.template.cliques}


def generation_hash(pcs: PodCliqueSet) -> str:
    """PCS status.currentGenerationHash: changes exactly when some clique's pods need recreating."""
    return _digest(sorted(pod_template_hashes(pcs).items()))


def strategy(pcs: PodCliqueSet) -> str:
    configured = pcs.spec.update_strategy.type if pcs.spec.update_strategy else None
    return configured or names.STRATEGY_ROLLING_RECREATE


# --- Validation --------------------------------------------------------------------------------------------
def rollout_problems(pcs: PodCliqueSet) -> Iterator[Problem]:
    """Problems of the rollingUpdate fields that span nodes (Grove's webhook rules). The single-field rules
    (updateStrategy.type, maxUnavailable >= 1, progressDeadline > 0) are in grove/rules.py, CEL in the CRD too."""
    kind = pcs.spec.update_strategy.type if pcs.spec.update_strategy else None
    on_delete = kind == names.STRATEGY_ON_DELETE
    grouped = {n for g in pcs.spec.template.pod_clique_scaling_groups for n in g.clique_names}
    for i, clique in enumerate(pcs.spec.template.cliques):
        path = f"spec.template.cliques[{i}].rollingUpdate"
        if clique.rolling_update is None:
            continue
        if clique.name in grouped:
            yield Problem(path, f"clique {clique.name!r} belongs to a podCliqueScalingGroup: set rollingUpdate on "
                                "the scaling group instead")
        yield from _config_problems(path, clique.rolling_update, on_delete)
    for i, group in enumerate(pcs.spec.template.pod_clique_scaling_groups):
        if group.rolling_update is not None:
            yield from _config_problems(f"spec.template.podCliqueScalingGroups[{i}].rollingUpdate",
                                        group.rolling_update, on_delete)


def _config_problems(path: str, config: Any, on_delete: bool) -> Iterator[Problem]:
    if on_delete:
        yield Problem(path, "must not be set when spec.updateStrategy.type is OnDelete (nothing is rolled)")


# --- What one replica's rollout needs from the spec -------------------------------------------------------
class ComponentPolicy(_Frozen):
    """The rollingUpdate of one component: a standalone PodClique (by PCLQ name) or a PCSG (by PCSG name)."""

    max_unavailable: int = Field(default=names.DEFAULT_MAX_UNAVAILABLE, ge=1)
    progress_deadline: timedelta | None = None


class RolloutSpec(_Frozen):
    """The update-relevant part of the current spec, for one replica."""

    strategy: str = names.STRATEGY_ROLLING_RECREATE
    generation_hash: str = ""
    components: dict[str, ComponentPolicy] = Field(default_factory=dict)


def rollout_spec(pcs: PodCliqueSet, topology: ReplicaTopology) -> RolloutSpec:
    templates = {c.name: c for c in pcs.spec.template.cliques}
    groups = {g.name: g for g in pcs.spec.template.pod_clique_scaling_groups}
    components: dict[str, ComponentPolicy] = {}
    for unit in topology.standalone():
        components[unit.name] = _policy(templates[unit.clique].rolling_update)
    for group in topology.scaling_groups:
        components[group.name] = _policy(groups[group.config_name].rolling_update)
    return RolloutSpec(strategy=strategy(pcs), generation_hash=generation_hash(pcs), components=components)


def _policy(config: Any) -> ComponentPolicy:
    if config is None:
        return ComponentPolicy()
    return ComponentPolicy(
        max_unavailable=config.max_unavailable or names.DEFAULT_MAX_UNAVAILABLE,
        progress_deadline=config.progress_deadline,
    )


# --- One replica's step -----------------------------------------------------------------------------------
class CliqueProgress(_Frozen):
    """One existing PodClique as the rollout sees it (live pods only; terminating pods are gone already)."""

    uid: str
    terminating: bool = False
    pods: int = 0
    ready: int = 0
    outdated: dict[str, str] = Field(default_factory=dict, description="live pods at another template: name -> UID")
    outdated_ready: tuple[str, ...] = Field(default=(), description="those of them that are Ready")
    updated_ready: int = Field(default=0, description="Ready pods at the target template")


class ReplicaStep(_Frozen):
    """What to do in one replica now."""

    delete_pods: dict[str, str] = Field(default_factory=dict, description="pod name -> UID, recreated by ensure")
    delete_cliques: dict[str, str] = Field(default_factory=dict,
                                           description="PCLQ name -> UID: whole PCSG replicas to recreate")
    recreating: tuple[str, ...] = Field(default=(), description="units recreated by this step, for humans")
    in_progress: frozenset[str] = Field(default=frozenset(), description="PCLQs being updated (UpdateInProgress)")
    progress: dict[str, int] = Field(default_factory=dict, description="component -> units updated and Ready")
    pending: dict[str, str] = Field(default_factory=dict, description="component -> what it waits for")
    acting: frozenset[str] = Field(default=frozenset(), description="components this step recreates units of")
    unfinished: frozenset[str] = Field(default=frozenset(), description="components not yet updated and Ready")
    done: bool = False

    @property
    def acts(self) -> bool:
        return bool(self.delete_pods or self.delete_cliques)


def clique_done(replicas: int, min_available: int, state: CliqueProgress | None) -> bool:
    """Updated and Ready >= minAvailable: every live pod at the target template, none missing."""
    return (state is not None and not state.terminating and not state.outdated and state.pods >= replicas
            and state.ready >= min_available)


def replica_step(topology: ReplicaTopology, cliques: Mapping[str, CliqueProgress], spec: RolloutSpec) -> ReplicaStep:
    """The next RollingRecreate step of one replica whose turn it is.

    Standalone PodClique: outdated pods that are not Ready are recreated at once (they are unavailable already, so
    recreating them costs no availability: Grove does the same); outdated Ready pods are recreated lowest index first
    while the clique's unavailable pods (missing or not Ready) stay within maxUnavailable.
    PCSG: the same per whole PCSG replica (its PodCliques are deleted and recreated; a replica is available when each
    of its PodCliques has minAvailable Ready pods). Only outdated units are ever recreated, so a unit recreated for
    this template is never recreated again for it.
    """
    delete_pods: dict[str, str] = {}
    delete_cliques: dict[str, str] = {}
    recreating: list[str] = []
    in_progress: set[str] = set()
    progress: dict[str, int] = {}
    pending: dict[str, str] = {}
    acting: set[str] = set()
    unfinished: set[str] = set()
    for unit in topology.standalone():
        state = cliques.get(unit.name)
        policy = spec.components.get(unit.name, ComponentPolicy())
        progress[unit.name] = state.updated_ready if state else 0
        if clique_done(unit.replicas, unit.min_available, state):
            continue
        in_progress.add(unit.name)
        unfinished.add(unit.name)
        if state is None or state.terminating:
            pending[unit.name] = "PodClique being recreated"
            continue
        unavailable = max(unit.replicas - state.ready, 0)
        not_ready = sorted((n for n in state.outdated if n not in state.outdated_ready), key=_index)
        ready = sorted((n for n in state.outdated if n in state.outdated_ready), key=_index)
        chosen = not_ready + ready[:max(policy.max_unavailable - unavailable, 0)]
        for pod in chosen:
            delete_pods[pod] = state.outdated[pod]
            recreating.append(f"pod {pod}")
            acting.add(unit.name)
        if not chosen:
            pending[unit.name] = (f"{len(state.outdated)} outdated pods wait: {unavailable} of maxUnavailable "
                                  f"{policy.max_unavailable} unavailable" if state.outdated
                                  else f"{state.ready} of {unit.min_available} required pods Ready")
    for group in topology.scaling_groups:
        policy = spec.components.get(group.name, ComponentPolicy())
        members = {j: topology.members(group.name, j) for j in range(group.replicas)}
        done = [j for j, units in members.items()
                if all(clique_done(u.replicas, u.min_available, cliques.get(u.name)) for u in units)]
        progress[group.name] = len(done)
        available = [j for j, units in members.items() if all(_available(u.min_available, cliques.get(u.name))
                                                              for u in units)]
        unavailable = group.replicas - len(available)
        outdated = [j for j, units in members.items()
                    if any((s := cliques.get(u.name)) is not None and not s.terminating and s.outdated for u in units)]
        budget = max(policy.max_unavailable - unavailable, 0)
        picked = [j for j in outdated if j not in available] + [j for j in outdated if j in available][:budget]
        for j in sorted(picked):
            for u in members[j]:
                state = cliques.get(u.name)
                if state is not None and not state.terminating:
                    delete_cliques[u.name] = state.uid
            recreating.append(f"{group.name} replica {j}")
            acting.add(group.name)
        if len(done) < group.replicas:
            unfinished.add(group.name)
        for index, units in members.items():
            if index not in done:
                in_progress.update(u.name for u in units)
        if len(done) < group.replicas and not picked:
            pending[group.name] = (f"{len(outdated)} outdated replicas wait: {unavailable} of maxUnavailable "
                                   f"{policy.max_unavailable} unavailable" if outdated
                                   else f"{len(done)} of {group.replicas} replicas updated and Ready")
    return ReplicaStep(
        delete_pods=delete_pods, delete_cliques=delete_cliques, recreating=tuple(recreating),
        in_progress=frozenset(in_progress), progress=progress, pending=pending, acting=frozenset(acting),
        unfinished=frozenset(unfinished), done=not in_progress,
    )


def replica_updated(topology: ReplicaTopology, cliques: Mapping[str, CliqueProgress]) -> bool:
    """Whether a replica is at the target template with every PodClique Ready >= minAvailable."""
    return all(clique_done(u.replicas, u.min_available, cliques.get(u.name)) for u in topology.cliques)


def replica_outdated(cliques: Mapping[str, CliqueProgress]) -> bool:
    return any(s.outdated and not s.terminating for s in cliques.values())


def replica_available(topology: ReplicaTopology, cliques: Mapping[str, CliqueProgress]) -> bool:
    """Every standalone PodClique and minAvailable replicas of every PCSG have minAvailable Ready pods."""
    standalone = all(_available(u.min_available, cliques.get(u.name)) for u in topology.standalone())
    groups = all(
        sum(1 for j in range(g.replicas)
            if all(_available(u.min_available, cliques.get(u.name)) for u in topology.members(g.name, j)))
        >= g.min_available
        for g in topology.scaling_groups
    )
    return standalone and groups


def _available(min_available: int, state: CliqueProgress | None) -> bool:
    return state is not None and not state.terminating and state.ready >= min_available


def _index(pod_name: str) -> tuple[int, str]:
    tail = pod_name.rsplit("-", 1)[-1]
    return (int(tail) if tail.isdigit() else -1, pod_name)


# --- progressDeadline -------------------------------------------------------------------------------------
class ProgressMark(_Frozen):
    """A component's progress figure and when it last moved."""

    value: int
    since: datetime


def advance_progress(
    marks: Mapping[str, ProgressMark], step: ReplicaStep, now: datetime, spec: RolloutSpec,
    due_by: datetime | None = None,
) -> tuple[dict[str, ProgressMark], tuple[str, ...]]:
    """New marks, and the components whose update has not moved for longer than their progressDeadline.

    Progress is a unit (pod or PCSG replica) becoming updated and Ready, or a unit being recreated; a component that
    is done never exceeds its deadline. `now` stamps progress; with `due_by`, a deadline is exceeded when it is at
    or before `due_by` (the replica workflow's fired timers), else when `now` is past it."""
    new: dict[str, ProgressMark] = {}
    exceeded: list[str] = []
    for component, value in sorted(step.progress.items()):
        old = marks.get(component)
        moved = old is None or old.value != value or component in step.acting
        mark = ProgressMark(value=value, since=now) if moved else old
        assert mark is not None
        new[component] = mark
        deadline = spec.components.get(component, ComponentPolicy()).progress_deadline
        if deadline is None or component not in step.unfinished:
            continue
        if (mark.since + deadline <= due_by) if due_by is not None else (now - mark.since > deadline):
            exceeded.append(component)
    return new, tuple(exceeded)


def deadline_due(marks: Mapping[str, ProgressMark], step: ReplicaStep, spec: RolloutSpec) -> datetime | None:
    """The earliest moment a not-yet-finished component would exceed its progressDeadline."""
    due = [
        mark.since + deadline
        for component, mark in marks.items()
        if (deadline := spec.components.get(component, ComponentPolicy()).progress_deadline) is not None
        and component in step.unfinished
    ]
    return min(due) if due else None


# --- Across the PCS ----------------------------------------------------------------------------------------
class ReplicaRollout(_Frozen):
    """One PCS replica as the coordinator sees it."""

    index: int = Field(ge=0)
    updated: bool = Field(description="every PodClique at the target template and Ready >= minAvailable")
    available: bool
    outdated: bool = Field(default=False, description="some live pod runs another template: needs a turn")


def next_replica(replicas: list[ReplicaRollout] | tuple[ReplicaRollout, ...]) -> int | None:
    """The next replica whose turn it is: one with outdated pods; unavailable replicas first, then by index.

    A replica without outdated pods needs no turn even when it is not Ready (its pods already have the new
    template; availability is then a matter for gang termination, not for the update)."""
    pending = [r for r in replicas if r.outdated]
    if not pending:
        return None
    return min(pending, key=lambda r: (r.available, r.index)).index
