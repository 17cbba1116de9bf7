"""One replica's objects as read from the cluster, and what they mean: the snapshot the workflow decides on and
the drift that materialising would fix. Functions over plain JSON dicts, shared by observe and ensure.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from activities.backend import Scheduling
from activities.fanout import fan_out
from activities.kubeapi import (
    JSON,
    PODCLIQUES,
    PODCLIQUESETS,
    PODGANGS,
    PODS,
    SCALINGGROUPS,
    Kube,
    Resource,
    controller_uid,
    name_of,
    ours,
    pod_gated,
    pod_ready,
    pod_scheduled,
    resource_version,
    terminating,
    uid_of,
)
from activities.watch_cache import NotFresh, WatchCache
from grove import names, ownership
from grove.controllers import other_controller_problem
from grove.models import PodCliqueSet
from grove.models.podcliqueset import wanted_replicas
from grove.plan import InvalidPodCliqueSet, ReplicaPlan, plan_replica, plan_validated, scaled_release_after
from grove.release import releasable as releasable_pod
from grove.rollout import rollout_spec
from grove.scale import ObservedCounts, observed_counts
from grove.scheduling import held_surplus_pods
from grove.validation import Problem, parse_pcs, validate_pcs_remembered
from workflows.messages import CliqueState, PcsState, ReplicaRef, ReplicaSnapshot


@dataclass
class ClusterView:
    """Everything of one replica that one read returned."""

    pcs: JSON | None
    pclqs: dict[str, JSON] = field(default_factory=dict)
    pods: dict[str, JSON] = field(default_factory=dict)
    gangs: dict[str, JSON] = field(default_factory=dict)
    pcsgs: dict[str, JSON] | None = None  # their spec.replicas are the replica's counts (grove.scale)
    foreign: list[tuple[str, str]] = field(default_factory=list)  # (kind, name) managed by the Grove operator
    read_from: datetime = field(default_factory=lambda: datetime.now(UTC))  # before the first read
    versions: dict[str, int] = field(default_factory=dict)  # kind -> resourceVersion this read saw up to

    def live_pods_of(self, pclq: JSON) -> list[JSON]:
        """Non-terminating pods controlled by this very PodClique incarnation."""
        uid = uid_of(pclq)
        return [p for p in self.pods.values() if controller_uid(p) == uid and not terminating(p)]

    def referenced(self) -> dict[str, set[str]]:
        """PodGang name -> pod names listed in its podReferences."""
        refs: dict[str, set[str]] = defaultdict(set)
        for gang_name, gang in self.gangs.items():
            for group in (gang.get("spec") or {}).get("podgroups") or []:
                for ref in group.get("podReferences") or []:
                    refs[gang_name].add(str(ref.get("name")))
        return refs

    def counts(self) -> ObservedCounts:
        """spec.replicas as stored on the replica's own PCSGs and PodCliques (what scaling wrote)."""
        pcs_uid = uid_of(self.pcs) if self.pcs else ""
        groups = [g for g in (self.pcsgs or {}).values() if ours(g) and controller_uid(g) == pcs_uid]
        group_uids = {uid_of(g) for g in groups} | {pcs_uid}
        pclqs = [p for p in self.pclqs.values() if ours(p) and controller_uid(p) in group_uids]
        return observed_counts(groups, pclqs)


def read_replica(kube: Kube, ref: ReplicaRef) -> ClusterView:
    read_from = datetime.now(UTC)
    pcs = kube.get(PODCLIQUESETS, ref.namespace, ref.pcs)
    view = ClusterView(pcs=pcs, read_from=read_from)
    if pcs is None or len(ref.pcs) > names.MAX_LABEL_VALUE_LENGTH:
        # Such a PCS is invalid, and its name cannot be a label value: nothing of ours carries it, and a selector
        # naming it is refused by the apiserver (400), which would fail every round instead of holding the replica.
        return view
    resources = [PODCLIQUES, PODS, PODGANGS, SCALINGGROUPS]
    listings = _list_replica(kube, ref, resources)
    view.versions = _read_versions([(PODCLIQUESETS, pcs)] + list(zip(resources, listings, strict=True)))
    return _sorted_into(view, {resource.kind: list(listing.get("items") or [])
                               for resource, listing in zip(resources, listings, strict=True)})


def read_pods(kube: Kube, ref: ReplicaRef) -> ClusterView:
    """The replica's PodCliques and pods only, read now in one round trip (two LISTs at once): for a check that
    counts pods, such as the recheck before a scaled release. The PodCliqueSet is not read (`pcs` is None); a
    replica whose PodCliqueSet is going away shows its PodCliques terminating, or none."""
    view = ClusterView(pcs=None)
    if len(ref.pcs) > names.MAX_LABEL_VALUE_LENGTH:
        return view
    resources = [PODCLIQUES, PODS]
    listings = _list_replica(kube, ref, resources)
    return _sorted_into(view, {resource.kind: list(listing.get("items") or [])
                               for resource, listing in zip(resources, listings, strict=True)})


def _list_replica(kube: Kube, ref: ReplicaRef, resources: list[Resource]) -> list[JSON]:
    selector = names.replica_selector_with_other_controllers(ref.pcs, ref.replica)
    return fan_out([functools.partial(kube.list, r, ref.namespace, label_selector=selector) for r in resources])


def read_replica_cached(cache: WatchCache, ref: ReplicaRef, at_least: dict[str, int] | None = None) -> ClusterView:
    """The same view as read_replica, from the worker's watch cache (activities/watch_cache.py), once the cache has
    reached `at_least`. NotFresh where the cache cannot serve it, and wherever the answer would end or replace the
    replica (its PodCliqueSet absent, replaced or being deleted): the caller then reads the apiserver, so that a
    cache that has not heard of a new PodCliqueSet yet never completes a workflow."""
    pcs, items, versions, read_from = cache.replica(ref.namespace, ref.pcs, ref.replica, at_least=at_least)
    if pcs is None or uid_of(pcs) != ref.pcs_uid or terminating(pcs):
        raise NotFresh("the PodCliqueSet is not there as this replica's in the cache")
    view = ClusterView(pcs=pcs, read_from=read_from, versions=versions)
    if len(ref.pcs) > names.MAX_LABEL_VALUE_LENGTH:
        return view
    return _sorted_into(view, items)


def _sorted_into(view: ClusterView, by_kind: dict[str, list[JSON]]) -> ClusterView:
    """Put a replica's objects, kind -> list as read, into the view: the Grove operator's as foreign, ours by name
    (PCSGs only when they were read)."""
    for kind, objects in by_kind.items():
        view.foreign += [(kind, name_of(obj)) for obj in objects if not ours(obj)]
    mine = {kind: {name_of(obj): obj for obj in objects if ours(obj)} for kind, objects in by_kind.items()}
    view.pclqs, view.pods, view.gangs = mine[PODCLIQUES.kind], mine[PODS.kind], mine.get(PODGANGS.kind, {})
    if SCALINGGROUPS.kind in mine:
        view.pcsgs = mine[SCALINGGROUPS.kind]
    return view


def _read_versions(reads: list[tuple[Resource, JSON]]) -> dict[str, int]:
    """kind -> the resourceVersion a read saw up to: a LIST's own (every change of that kind up to it is in the
    list), a single object's own (every change of it up to it). Versions of one kind are comparable integers
    (Kubernetes 1.35, KEP-5504); one that is not an integer (another apiserver) is left out, and a nudge for that
    kind then falls back to the clock."""
    versions: dict[str, int] = {}
    for resource, read in reads:
        version = resource_version(read)
        if version is not None:
            versions[resource.kind] = version
    return versions


@dataclass
class SpecReading:
    state: PcsState
    pcs: PodCliqueSet | None = None
    plan: ReplicaPlan | None = None
    problems: tuple[str, ...] = ()
    generation: int = 0
    wanted_replicas: int = 0
    backend: str = names.BACKEND_NONE  # the gang scheduler of this PCS (activities/backend.py)


class _Version:
    """A PodCliqueSet manifest keyed by what parsing, validation and planning read of it: its uid, its generation
    (the apiserver bumps it on every change outside metadata and status, the CRD having a status subresource) and
    its labels and annotations. The same key means the same answer, so it is computed once. A worker reads one
    PodCliqueSet for every round of each of its replicas, in every rollout observation and autoscaler sync, and
    parsing, validating and planning it again each time took 7 to 14% of the worker's Python time in B5 (issue 17).
    Not the resourceVersion: the PodCliqueSet's status, written all the time while its replicas change, moves it."""

    __slots__ = ("key", "obj")

    def __init__(self, obj: JSON) -> None:
        meta = obj.get("metadata") or {}
        self.key = (meta.get("uid"), meta.get("generation"), tuple(sorted((meta.get("labels") or {}).items())),
                    tuple(sorted((meta.get("annotations") or {}).items())))
        self.obj = obj

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Version) and self.key == other.key


def _versioned(obj: JSON) -> _Version | None:
    version = _Version(obj)
    uid, generation = version.key[:2]
    return version if uid and generation else None  # not from the apiserver (no uid or generation): no memo


@functools.lru_cache(maxsize=2048)
def _parsed(version: _Version) -> tuple[PodCliqueSet | None, tuple[Problem, ...]]:
    return _parse_checked(version.obj)


def _parse_checked(pcs_obj: JSON) -> tuple[PodCliqueSet | None, tuple[Problem, ...]]:
    pcs, problems = parse_pcs(pcs_obj)
    if pcs is not None and not problems:
        problems = validate_pcs_remembered(pcs_obj)
    return pcs, tuple(problems)


def parsed_pcs(pcs_obj: JSON) -> tuple[PodCliqueSet | None, tuple[Problem, ...]]:
    """parse_pcs, then validation if it parsed; remembered per generation. The model is shared between callers
    that read the same version: read it, never change it."""
    version = _versioned(pcs_obj)
    return _parsed(version) if version is not None else _parse_checked(pcs_obj)


@functools.lru_cache(maxsize=8192)
def _planned(version: _Version, replica: int, counts: tuple[tuple[tuple[str, int], ...], ...]) -> ReplicaPlan:
    pcs, problems = _parsed(version)
    if pcs is None or problems:
        raise InvalidPodCliqueSet(list(problems))
    return plan_validated(pcs, replica, _counts(counts))


def _counts_key(counts: ObservedCounts | None) -> tuple[tuple[tuple[str, int], ...], ...]:
    counts = counts or ObservedCounts()
    return tuple(sorted(counts.scaling_groups.items())), tuple(sorted(counts.pod_cliques.items()))


def _counts(key: tuple[tuple[tuple[str, int], ...], ...]) -> ObservedCounts:
    return ObservedCounts(scaling_groups=dict(key[0]), pod_cliques=dict(key[1]))


def planned_replica(pcs_obj: JSON, pcs: PodCliqueSet, replica: int,
                    counts: ObservedCounts | None = None) -> ReplicaPlan:
    """plan_replica of the model `pcs` parsed from `pcs_obj`, remembered per generation, replica and counts
    (a ReplicaPlan is frozen, so sharing it is safe). Raises InvalidPodCliqueSet as plan_replica does."""
    version = _versioned(pcs_obj)
    if version is None:
        return plan_replica(pcs, replica, counts)
    return _planned(version, replica, _counts_key(counts))


def read_spec(pcs_obj: JSON | None, ref: ReplicaRef, scheduling: Scheduling | None = None,
              counts: ObservedCounts | None = None) -> SpecReading:
    """Is the PCS still ours to drive, how many replicas does it want, and what does this replica look like
    (`counts`: the replica counts stored on its objects, grove.scale).
    A scheduler backend the cluster cannot serve makes the spec unusable like a validation problem."""
    if pcs_obj is None:
        return SpecReading(PcsState.ABSENT)
    meta = pcs_obj.get("metadata", {})
    if meta.get("uid") != ref.pcs_uid:
        return SpecReading(PcsState.REPLACED)
    generation = int(meta.get("generation") or 0)
    # Unreadable (invalid) count: this replica counts as wanted, so nothing reads it as a scale-in.
    wanted = wanted_replicas(pcs_obj)
    wanted = ref.replica + 1 if wanted is None else wanted
    if meta.get("deletionTimestamp"):
        return SpecReading(PcsState.DELETING, generation=generation, wanted_replicas=wanted)
    pcs, problems = parsed_pcs(pcs_obj)
    if pcs is None or problems:
        return SpecReading(
            PcsState.PRESENT,
            problems=tuple(str(p) for p in problems) or ("spec: could not be parsed",),
            generation=generation,
            wanted_replicas=wanted,
        )
    scheduling = scheduling or Scheduling()
    backend = scheduling.backend_for(pcs)
    unusable = scheduling.problem(backend)
    if unusable:
        return SpecReading(PcsState.PRESENT, problems=(unusable,), generation=generation,
                           wanted_replicas=pcs.spec.replicas, backend=backend)
    return SpecReading(
        PcsState.PRESENT,
        pcs=pcs,
        plan=planned_replica(pcs_obj, pcs, ref.replica, counts),
        generation=generation,
        wanted_replicas=pcs.spec.replicas,
        backend=backend,
    )


def clique_states(view: ClusterView, plan: ReplicaPlan | None = None,
                  targets: Mapping[str, str] | None = None) -> dict[str, CliqueState]:
    """Each PodClique's state; a pod is outdated when labelled with another template than `plan` (or `targets`,
    PCLQ name -> pod template hash) gives its PodClique."""
    references = view.referenced()
    planned = {p.name: p.pod_template_hash for p in plan.pod_cliques} if plan is not None else dict(targets or {})
    states: dict[str, CliqueState] = {}
    for name, pclq in view.pclqs.items():
        pods = view.live_pods_of(pclq)
        releasable: dict[str, str] = {}
        waiting: dict[str, str] = {}
        for pod in pods:
            if (pod["metadata"].get("annotations") or {}).get(names.ANNOTATION_STARTUP) == names.STARTUP_WAITING:
                waiting[name_of(pod)] = uid_of(pod)
            gang = (pod["metadata"].get("labels") or {}).get(names.LABEL_PODGANG, "")
            if releasable_pod(pod_gated(pod), name_of(pod), references.get(gang, ())):
                releasable[name_of(pod)] = uid_of(pod)
        target = planned.get(name, "")
        outdated = {name_of(p): uid_of(p) for p in pods if target and _outdated(p, target)}
        states[name] = CliqueState(
            uid=uid_of(pclq),
            terminating=terminating(pclq),
            pods=len(pods),
            ready=sum(1 for p in pods if pod_ready(p)),
            scheduled=sum(1 for p in pods if pod_scheduled(p)),
            gated=sum(1 for p in pods if pod_gated(p)),
            releasable=releasable,
            startup_waiting=waiting,
            target_hash=target,
            outdated=outdated,
            outdated_ready=tuple(sorted(n for n in outdated if pod_ready(view.pods[n]))),
            updated_ready=sum(1 for p in pods if pod_ready(p) and name_of(p) not in outdated) if target else 0,
        )
    return states


def _outdated(pod: JSON, target: str) -> bool:
    """Labelled with another template. A pod without the label (created before it existed) is adopted as current:
    grove-temporal cannot tell what it was made from (docs/limitations.md)."""
    label = (pod["metadata"].get("labels") or {}).get(names.LABEL_POD_TEMPLATE_HASH)
    return label is not None and label != target


def drift(view: ClusterView, plan: ReplicaPlan) -> list[str]:
    """Actionable differences between the cluster and the plan (things still terminating are waited for)."""
    found: list[str] = []
    if view.pcsgs is not None:  # a count below minAvailable is written back (grove.scale)
        for sg in plan.scaling_groups:
            pcsg = view.pcsgs.get(sg.name)
            if pcsg is None:
                found.append(f"missing PodCliqueScalingGroup {sg.name}")
            elif not terminating(pcsg) and (pcsg.get("spec") or {}).get("replicas") != sg.replicas:
                found.append(f"PodCliqueScalingGroup {sg.name} replicas differ")
    planned_pclqs = {p.name: p for p in plan.pod_cliques}
    for name, expected in planned_pclqs.items():
        pclq = view.pclqs.get(name)
        if pclq is None:
            found.append(f"missing PodClique {name}")
            continue
        if terminating(pclq):
            continue
        if (pclq.get("spec") or {}).get("replicas") != expected.replicas:
            found.append(f"PodClique {name} replicas differ")
        live = {name_of(p) for p in view.live_pods_of(pclq)}
        present = set(view.pods)
        wanted = set(expected.pod_names)
        missing = sorted(pod for pod in wanted - live if pod not in present)
        if missing:
            found.append(f"missing pods {', '.join(missing)}")
        surplus = sorted(live - wanted)
        if surplus:
            found.append(f"surplus pods {', '.join(surplus)}")
    # Surplus only counts what ensure_replica may delete: a look-alike with our labels but a foreign owner is not
    # drift (it would hold the replica out of Available forever, ensuring in vain on every wake).
    pcs_uid = uid_of(view.pcs) if view.pcs else ""
    our_groups = ownership.scaling_groups_of(pcs_uid, (view.pcsgs or {}).values())  # as ensure_replica reads them
    for name, pclq in view.pclqs.items():
        if (name not in planned_pclqs and ours(pclq) and not terminating(pclq)
                and ownership.within_replica(pclq, pcs_uid, our_groups)):
            found.append(f"surplus PodClique {name}")
    references = view.referenced()
    for gang in plan.pod_gangs:
        obj = view.gangs.get(gang.name)
        if obj is None:
            found.append(f"missing PodGang {gang.name}")
            continue
        if terminating(obj):
            continue
        expected_refs = set()
        for group in gang.pod_groups:
            pclq = view.pclqs.get(group.name)
            if pclq is not None and not terminating(pclq):
                expected_refs |= {name_of(p) for p in view.live_pods_of(pclq)}
        if references.get(gang.name, set()) != expected_refs or _podgroups_differ(obj, gang):
            found.append(f"PodGang {gang.name} references are stale")
    planned_groups = {sg.name for sg in plan.scaling_groups}
    for name, group_obj in (view.pcsgs or {}).items():  # a scaling group removed from the spec (ensure deletes it)
        if (name not in planned_groups and ours(group_obj) and not terminating(group_obj)
                and controller_uid(group_obj) == pcs_uid):
            found.append(f"surplus PodCliqueScalingGroup {name}")
    planned_gangs = {g.name for g in plan.pod_gangs}
    for name, gang_obj in view.gangs.items():
        if (name not in planned_gangs and ours(gang_obj) and not terminating(gang_obj)
                and controller_uid(gang_obj) == pcs_uid):
            found.append(f"surplus PodGang {name}")
    return found


def _podgroups_differ(gang_obj: JSON, gang_plan: object) -> bool:
    groups = (gang_obj.get("spec") or {}).get("podgroups") or []
    have = {(g.get("name"), g.get("minReplicas")) for g in groups}
    want = {(g.name, g.min_replicas) for g in gang_plan.pod_groups}  # type: ignore[attr-defined]
    return have != want


def other_controller(view: ClusterView) -> tuple[str, ...]:
    finalizers = ((view.pcs or {}).get("metadata") or {}).get("finalizers") or []
    problem = other_controller_problem(finalizers, view.foreign)
    return (problem,) if problem else ()


def _hold_surplus(cliques: dict[str, CliqueState], plan: ReplicaPlan) -> dict[str, CliqueState]:
    """kube backend: surplus pods keep their gate until their gang is scheduled (grove/scheduling.py)."""
    held = held_surplus_pods(plan, {name: c.scheduled for name, c in cliques.items() if not c.terminating})
    return {
        name: c.model_copy(update={"releasable": {p: u for p, u in c.releasable.items() if p not in held}})
        for name, c in cliques.items()
    }


def snapshot(view: ClusterView, spec: SpecReading) -> ReplicaSnapshot:
    plan = spec.plan
    cliques = clique_states(view, plan)
    if plan is not None and spec.backend == names.BACKEND_KUBE:
        cliques = _hold_surplus(cliques, plan)
    return ReplicaSnapshot(
        read_at=datetime.now(UTC),
        read_from=view.read_from,
        read_versions=view.versions,
        pcs_state=spec.state,
        pcs_generation=spec.generation,
        wanted_replicas=spec.wanted_replicas,
        problems=spec.problems + other_controller(view),
        topology=plan.topology() if plan is not None else None,
        release_after=scaled_release_after(spec.pcs) if spec.pcs is not None else "Scheduled",
        cliques=cliques,
        drift=tuple(drift(view, plan)) if plan is not None else (),
        rollout=rollout_spec(spec.pcs, plan.topology()) if plan is not None and spec.pcs is not None else None,
        scheduler_backend=spec.backend if spec.state is PcsState.PRESENT else None,
    )
