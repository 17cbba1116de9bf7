"""The invariants of a fault run, as pure functions over what was read from the real objects, our own watch record
and the workflow histories (never from the status the product mirrors onto the objects).

| invariant     | from                                                    | holds when                                     |
|---------------|---------------------------------------------------------|------------------------------------------------|
| never-early   | history (terminate_gang scheduled time and request,     | scheduled >= deadline = breach_start + delay; |
|               | the reads rounds decided on), our PodClique watch       | every deleted incarnation marked >= deadline;  |
|               | (deletionTimestamp, arrival)                            | a read at or before breach_start showed one of |
|               |                                                         | the terminated incarnations short              |
| exactly-once  | history, Events, our PodClique watch                    | one termination per breach; a breach of a      |
|               |                                                         | recreated target starts after the termination; |
|               |                                                         | GangTerminated Events <= terminations; no      |
|               |                                                         | PodClique deleted without a termination; none  |
|               |                                                         | of a paused replica                            |
| none-missing  | live pods, history (what the workflow saw available)    | after the quiet period no PodClique the        |
|               |                                                         | workflow saw available is still breached       |
| scaled-gates  | our pod watch, in stream order                          | a scaled pod's gate goes only after its base   |
|               |                                                         | gang had minReplicas scheduled pods per group  |
| objects       | live objects vs grove.plan.plan_replica                 | nothing of ours missing or left over           |
| foreign       | live objects                                            | UID and resourceVersion unchanged              |
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from activities.kubeapi import FIELD_MANAGER as PRODUCT_FIELD_MANAGER  # every write of the product carries it
from activities.kubeapi import JSON
from faults.history import TerminateCall, WorkflowDigest, write_history
from faults.recorder import PclqRecord, PodEvent, PodState
from grove import names
from grove.plan import ReplicaPlan
from grove.termination import Scope
from worker.doctor import has_a_workflow_task
from workflows.messages import TerminateRequest

if TYPE_CHECKING:
    from temporalio.client import WorkflowHistory
    from temporalio.worker import Replayer

ReplicaKey = tuple[str, int]  # (pcs, replica)

NEVER_EARLY = "never-early"
EXACTLY_ONCE = "exactly-once"
NONE_MISSING = "none-missing"
SCALED_GATES = "scaled-gates"
OBJECTS = "objects"
FOREIGN = "foreign"
REPLAYABLE = "replayable"
DECIDED_FRESH = "decided-fresh"
DEADLOCK_DETECTED = "TMPRL1101"  # the SDK's "Potential deadlock detected" failure
INVARIANTS = (NEVER_EARLY, EXACTLY_ONCE, NONE_MISSING, SCALED_GATES, OBJECTS, FOREIGN, DECIDED_FRESH)


@dataclass(frozen=True)
class Violation:
    invariant: str
    key: str  # identifies the fault, so the same one found again in a later round is counted once
    detail: str


@dataclass(frozen=True)
class LateDeletion:
    """One gang termination's PodClique deletion as our watch saw it, after its deadline: kept whole so the slowest
    can be named afterwards, with the faults that ran around them."""
    seconds: float  # from the deadline to the deletion we saw
    replica: str
    pod_clique: str
    uid: str
    scope: str
    deadline: float  # wall-clock seconds
    seen: float  # wall-clock seconds


@dataclass
class Findings:
    violations: list[Violation] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    lateness: list[LateDeletion] = field(default_factory=list)

    def violate(self, invariant: str, key: str, detail: str) -> None:
        self.violations.append(Violation(invariant, key, detail))

    def merge(self, other: Findings) -> Findings:
        self.violations += other.violations
        for k, v in other.counts.items():
            self.counts[k] += v
        self.lateness += other.lateness
        return self


def _labels_key(labels: dict[str, str]) -> ReplicaKey | None:
    pcs, index = labels.get(names.LABEL_PART_OF), labels.get(names.LABEL_PCS_REPLICA_INDEX)
    if not pcs or index is None or not str(index).isdigit():
        return None
    return pcs, int(index)


def _floor_second(moment: datetime) -> datetime:
    return moment.replace(microsecond=0)


# --- never early -------------------------------------------------------------------------------------------------
def never_early(digests: dict[ReplicaKey, WorkflowDigest], pclqs: dict[str, PclqRecord]) -> Findings:
    found = Findings()
    for key, digest in digests.items():
        for call in digest.terminations:
            request = call.request
            found.counts["terminations_checked"] += 1
            found.counts[f"terminations_{request.scope.value}{'_forced' if request.forced else ''}"] += 1
            found.counts["terminations_found_healed"] += bool(call.healed)
            if not request.forced:
                if request.breach_start is None or request.delay is None:
                    found.violate(NEVER_EARLY, f"nostart/{call.key}", f"{key}: breach termination without breach "
                                  f"start or delay: {request.reason}")
                elif request.breach_start + request.delay != request.deadline:
                    found.violate(NEVER_EARLY, f"deadline/{call.key}", f"{key}: deadline {request.deadline} is not "
                                  f"breach start {request.breach_start} + delay {request.delay}")
                elif not _breach_seen_by(digest, request):
                    found.violate(NEVER_EARLY, f"stamped/{call.key}", f"{key}: breach start "
                                  f"{request.breach_start.isoformat()} is before any read that showed "
                                  f"{', '.join(sorted(request.cliques))} short")
            if call.scheduled_at < request.deadline:
                found.violate(NEVER_EARLY, f"scheduled/{call.key}", f"{key}: terminate_gang scheduled at "
                              f"{call.scheduled_at.isoformat()}, before its deadline {request.deadline.isoformat()}")
            for name, uid in request.cliques.items():
                record = pclqs.get(uid)
                if record is None or record.deletion_timestamp is None:
                    continue
                found.counts["deletions_checked"] += 1
                # deletionTimestamp has whole seconds: compare with the deadline rounded down
                if record.deletion_timestamp < _floor_second(request.deadline):
                    found.violate(NEVER_EARLY, f"pclq/{uid}", f"{key}: PodClique {name} ({uid}) marked for deletion "
                                  f"at {record.deletion_timestamp.isoformat()}, before the deadline "
                                  f"{request.deadline.isoformat()}")
                if record.deleting_seen is not None and not record.deleting_seen_relist:
                    late = record.deleting_seen - request.deadline.timestamp()
                    found.lateness.append(LateDeletion(late, f"{key[0]}/{key[1]}", name, uid, request.scope.value,
                                                       request.deadline.timestamp(), record.deleting_seen))
                    if late < 0:
                        found.violate(NEVER_EARLY, f"seen/{uid}", f"{key}: PodClique {name} ({uid}) seen deleting "
                                      f"{-late:.3f}s before the deadline {request.deadline.isoformat()}")
    return found


def _breach_seen_by(digest: WorkflowDigest, request: TerminateRequest) -> bool:
    """Some read a round decided on, taken at or before the breach start, showed the breach: one of the incarnations
    to be terminated short of minAvailable (for a PCS replica, any of its PodCliques), or a PodClique missing, or it
    could not be judged. A breach is stamped no earlier than the read that showed it, by that read's clock; a stamp
    before every such read ran the deadline short (workflows/replica.py, READ_TIME_FLOOR_PATCH). A chain whose reads
    the history does not hold (none recorded) is not judged."""
    reads, start = digest.reads, request.breach_start
    if not reads or start is None:
        return True
    uids = set(request.cliques.values())
    whole = request.scope is Scope.PCS_REPLICA
    return any(read.read_at <= start and (read.short is None or read.missing or bool(read.short & uids)
                                          or (whole and bool(read.short)))
               for read in reads)


# --- decided fresh ---------------------------------------------------------------------------------------------
def decided_fresh(digests: dict[ReplicaKey, WorkflowDigest]) -> Findings:
    """No deletion (gang termination, a rolling update's recreate) is decided on a read from the watch cache alone:
    the read in force when it was scheduled came from the apiserver (issue 17)."""
    found = Findings()
    for key, digest in digests.items():
        for run in digest.runs:
            found.counts["deletion_decisions_checked"] += len(run.terminations) + len(run.recreations)
            for event_id in run.decided_on_cache:
                found.violate(DECIDED_FRESH, f"cache/{digest.workflow_id}@{run.run_id}#{event_id}",
                              f"{key}: event {event_id} of run {run.run_id} deletes on a read from the watch cache")
    return found


# --- exactly once ------------------------------------------------------------------------------------------------
def _target(call: TerminateCall) -> tuple[str, str | None, int | None]:
    request = call.request
    return request.scope.value, request.scaling_group, request.scaling_group_replica


def exactly_once(digests: dict[ReplicaKey, WorkflowDigest], terminations_total: dict[ReplicaKey, int],
                 events: list[JSON], pcs_uids: dict[str, str], pclqs: dict[str, PclqRecord],
                 paused: set[ReplicaKey], settled: bool, planned: set[str] | None = None,
                 rollout_cliques: set[str] | None = None, histories_read_at: float | None = None) -> Findings:
    """`planned`: the PodClique names of the plans (the template's counts). A PodClique outside them exists only
    because an HPA-style scale-up made it, and the scale-in back to the template removes it: not a termination.
    `rollout_cliques`: PodClique UIDs a rolling update deleted (whole PCSG replicas recreated from the new
    template, named by a recreate_for_update activity in the histories): not a termination either.
    `histories_read_at`: when the histories began to be read. A deletion seen after it may have been asked for by
    an activity those histories do not hold yet; it is judged in a later check, on histories read after it."""
    found = Findings()
    for key, digest in digests.items():
        calls = digest.terminations
        done = [c for c in calls if c.carried_out]  # one the activity found healed deleted nothing, counts nothing
        if settled:
            for call in calls:
                if not call.completed:
                    found.violate(EXACTLY_ONCE, f"incomplete/{call.key}", f"{key}: terminate_gang scheduled at "
                                  f"{call.scheduled_at.isoformat()} never completed")
            total = terminations_total.get(key)
            if total is not None and total != len(done):
                found.violate(EXACTLY_ONCE, f"total/{key}/{total}/{len(done)}", f"{key}: workflow counts {total} "
                              f"terminations, its history holds {len(done)} completed terminate_gang activities")
        seen: dict[tuple[object, ...], TerminateCall] = {}
        for index, call in enumerate(done):
            request = call.request
            if key in paused and not request.forced:
                found.violate(EXACTLY_ONCE, f"paused/{call.key}", f"{key}: paused replica terminated: "
                              f"{request.reason}")
            if request.forced:
                continue
            breach_key = (*_target(call), request.breach_start)
            if breach_key in seen:
                found.violate(EXACTLY_ONCE, f"twice/{call.key}", f"{key}: breach {breach_key} terminated twice: "
                              f"{seen[breach_key].key} and {call.key}")
            seen[breach_key] = call
            for earlier in done[:index]:
                covers = earlier.request.scope is Scope.PCS_REPLICA or _target(earlier) == _target(call)
                if (covers and earlier.completed_at is not None and request.breach_start is not None
                        and request.breach_start < earlier.completed_at):
                    found.violate(EXACTLY_ONCE, f"restart/{call.key}", f"{key}: {call.key} acts on a breach that "
                                  f"began {request.breach_start.isoformat()}, before the termination {earlier.key} "
                                  f"of the same target completed ({earlier.completed_at.isoformat()})")
        # Every PodClique incarnation of ours that was deleted was named by one of this workflow's terminations.
        named = {uid for call in calls if not call.healed for uid in call.request.cliques.values()}
        for record in pclqs.values():
            if record.ours and _labels_key(record.labels) == key and record.deleting_seen is not None:
                if histories_read_at is not None and record.deleting_seen >= histories_read_at:
                    continue
                found.counts["pclq_deletions_seen"] += 1
                if planned is not None and record.name not in planned:
                    found.counts["pclq_scaled_in_seen"] += 1
                    continue
                if rollout_cliques and record.uid in rollout_cliques:
                    found.counts["pclq_rollout_deletions_seen"] += 1
                    continue
                if record.uid not in named:
                    found.violate(EXACTLY_ONCE, f"unexplained/{record.uid}", f"{key}: PodClique {record.name} "
                                  f"({record.uid}) was deleted but no terminate_gang named it")
    # GangTerminated Events per replica: never more than the terminations.
    by_replica: dict[ReplicaKey, int] = defaultdict(int)
    uid_to_pcs = {uid: pcs for pcs, uid in pcs_uids.items()}
    for event in events:
        if event.get("reason") != "GangTerminated":
            continue
        pcs = uid_to_pcs.get((event.get("involvedObject") or {}).get("uid", ""))
        message = str(event.get("message") or "")
        if pcs is None or not message.startswith("replica "):
            continue
        replica = message[len("replica "):].split(":", 1)[0]
        if replica.isdigit():
            by_replica[(pcs, int(replica))] += int(event.get("count") or 1)
    for key, count in by_replica.items():
        found.counts["gang_terminated_events"] += count
        done_count = len([c for c in digests[key].terminations if c.carried_out]) if key in digests else 0
        if count > done_count:
            found.violate(EXACTLY_ONCE, f"events/{key}/{count}", f"{key}: {count} GangTerminated Events for "
                          f"{done_count} terminations")
    return found


# --- scaled gates ------------------------------------------------------------------------------------------------
def scaled_gates(pod_events: Iterable[PodEvent], plans: dict[ReplicaKey, ReplicaPlan]) -> Findings:
    """Replays our pod stream: whenever a scaled pod (ours, grove.io/base-podgang set) loses our gate, its base gang
    must have been scheduled at some point since that pod was created (the workflow observed it gated, then the
    base gang scheduled, then released it)."""
    found = Findings()
    live: dict[ReplicaKey, dict[str, PodState]] = defaultdict(dict)
    base_ok: dict[str, bool] = {}  # scaled pod uid -> base gang seen scheduled since its creation

    def base_scheduled(key: ReplicaKey) -> bool:
        plan = plans.get(key)
        if plan is None:
            return False
        pods = live[key].values()
        for group in plan.base_gang.pod_groups:
            count = sum(1 for p in pods if p.ours and not p.deleting and p.scheduled
                        and p.labels.get(names.LABEL_PODCLIQUE) == group.name)
            if count < group.min_replicas:
                return False
        return True

    for event in pod_events:
        pod = event.pod
        key = _labels_key(pod.labels)
        if key is None or not pod.ours:
            continue
        previous = live[key].get(pod.uid)
        if event.type == "DELETED":
            live[key].pop(pod.uid, None)
        else:
            live[key][pod.uid] = pod
        scheduled_now = base_scheduled(key)
        if scheduled_now:
            for other in live[key].values():
                if names.LABEL_BASE_PODGANG in other.labels and other.gated:
                    base_ok[other.uid] = True
        if names.LABEL_BASE_PODGANG not in pod.labels or event.type == "DELETED" or pod.gated:
            continue
        if previous is not None and not previous.gated:
            continue  # released earlier, already checked
        found.counts["scaled_releases_checked"] += 1
        if previous is None and not event.relist:
            found.violate(SCALED_GATES, f"ungated-at-birth/{pod.uid}", f"{key}: scaled pod {pod.name} was created "
                          "without our scheduling gate")
        elif not (base_ok.get(pod.uid) or scheduled_now):
            found.violate(SCALED_GATES, f"early/{pod.uid}", f"{key}: scaled pod {pod.name} ({pod.uid}) released "
                          f"at {datetime.fromtimestamp(event.at, UTC).isoformat()} before its base gang "
                          f"{pod.labels.get(names.LABEL_BASE_PODGANG)} was scheduled")
    return found


# --- objects -----------------------------------------------------------------------------------------------------
@dataclass
class LiveObjects:
    """Every object of the namespace of the kinds we create, as listed at one moment."""

    pclqs: list[JSON]
    pcsgs: list[JSON]
    gangs: list[JSON]
    pods: list[JSON]
    services: list[JSON]
    nodes: set[str]
    pcses: list[JSON] = field(default_factory=list)


def _meta(obj: JSON) -> JSON:
    return obj.get("metadata") or {}


def _controller_uid(obj: JSON) -> str | None:
    for ref in _meta(obj).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid"))
    return None


def _ours(obj: JSON) -> bool:
    return (_meta(obj).get("labels") or {}).get(names.LABEL_MANAGED_BY) == names.MANAGED_BY


def _deleting(obj: JSON) -> bool:
    return bool(_meta(obj).get("deletionTimestamp"))


def our_objects(live: LiveObjects, pcs_uids: dict[str, str]) -> dict[ReplicaKey, dict[str, set[str]]]:
    """(pcs, replica) -> kind -> names of the live (not terminating) objects owned through our ownership chain:
    PCS → PCSG/PodGang/Service/standalone PCLQ, PCSG → PCLQ, PCLQ → pod. Look-alikes have labels, not owners."""
    result: dict[ReplicaKey, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    pcs_owned = set(pcs_uids.values())
    pcsg_uids = {_meta(g)["uid"] for g in live.pcsgs if _ours(g) and _controller_uid(g) in pcs_owned}
    pclq_uids = {_meta(p)["uid"] for p in live.pclqs
                 if _ours(p) and (_controller_uid(p) in pcs_owned or _controller_uid(p) in pcsg_uids)}
    owned = (("PodCliqueScalingGroup", live.pcsgs, pcs_owned), ("PodGang", live.gangs, pcs_owned),
             ("Service", live.services, pcs_owned), ("PodClique", live.pclqs, pcs_owned | pcsg_uids),
             ("Pod", live.pods, pclq_uids))
    for kind, items, owners in owned:
        for obj in items:
            key = _labels_key(_meta(obj).get("labels") or {})
            if key is None or not _ours(obj) or _deleting(obj) or _controller_uid(obj) not in owners:
                continue
            result[key][kind].add(_meta(obj)["name"])
    return result


def expected_objects(plan: ReplicaPlan) -> dict[str, set[str]]:
    return {
        "PodCliqueScalingGroup": {g.name for g in plan.scaling_groups},
        "PodGang": {g.name for g in plan.pod_gangs},
        "Service": {plan.service.name},
        "PodClique": {p.name for p in plan.pod_cliques},
        "Pod": {pod for p in plan.pod_cliques for pod in p.pod_names},
    }


def objects_match(live: LiveObjects, plans: dict[ReplicaKey, ReplicaPlan], pcs_uids: dict[str, str],
                  round_: int) -> Findings:
    found = Findings()
    have = our_objects(live, pcs_uids)
    for key, plan in plans.items():
        expected = expected_objects(plan)
        for kind, wanted in expected.items():
            present = have.get(key, {}).get(kind, set())
            found.counts["objects_checked"] += len(wanted)
            for name in sorted(wanted - present):
                found.violate(OBJECTS, f"missing/{round_}/{kind}/{name}", f"{key}: {kind} {name} missing")
            for name in sorted(present - wanted):
                found.violate(OBJECTS, f"leaked/{round_}/{kind}/{name}", f"{key}: {kind} {name} left over")
    for key in set(have) - set(plans):
        found.violate(OBJECTS, f"leaked/{round_}/{key}", f"objects of a replica that should not exist: {key}")
    # Pods whose PodClique is gone but which are still there (not terminating): leaked, whatever their labels say.
    pclq_uids = {_meta(p)["uid"] for p in live.pclqs}
    for pod in live.pods:
        owner = next((r for r in _meta(pod).get("ownerReferences") or [] if r.get("controller")), None)
        if (_ours(pod) and owner and owner.get("kind") == names.KIND_PODCLIQUE and owner.get("uid") not in pclq_uids
                and not _deleting(pod)):
            found.violate(OBJECTS, f"orphan/{_meta(pod)['uid']}", f"pod {_meta(pod)['name']} outlived its PodClique")
    return found


def unsettled_objects(live: LiveObjects, plans: dict[ReplicaKey, ReplicaPlan], pcs_uids: dict[str, str]) -> list[str]:
    """Why the objects are not converged yet (empty when they are)."""
    problems = [v.detail for v in objects_match(live, plans, pcs_uids, 0).violations]
    for kind, items in (("PodClique", live.pclqs), ("Pod", live.pods), ("PodGang", live.gangs)):
        problems += [f"{kind} {_meta(o)['name']} terminating" for o in items if _ours(o) and _deleting(o)]
    return problems


# --- none missing ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Breach:
    key: ReplicaKey
    pclq: str
    uid: str
    ready: int
    min_available: int
    since: float | None  # wall clock of the last drop below minAvailable in our pod stream (None: unknown)


def live_breaches(live: LiveObjects, plans: dict[ReplicaKey, ReplicaPlan], pcs_uids: dict[str, str],
                  in_scope: set[ReplicaKey], pod_events: list[PodEvent]) -> list[Breach]:
    """Live PodCliques of in-scope replicas (termination on, not paused) below minAvailable Ready pods right now."""
    pcs_owned = set(pcs_uids.values())
    pcsg_uids = {_meta(g)["uid"] for g in live.pcsgs if _controller_uid(g) in pcs_owned}
    ready: dict[str, int] = defaultdict(int)
    for pod in live.pods:
        conditions = (pod.get("status") or {}).get("conditions") or []
        if not _deleting(pod) and any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
            ready[_controller_uid(pod) or ""] += 1
    breaches = []
    for pclq in live.pclqs:
        meta = _meta(pclq)
        key = _labels_key(meta.get("labels") or {})
        if (key is None or key not in in_scope or not _ours(pclq) or _deleting(pclq)
                or _controller_uid(pclq) not in pcs_owned | pcsg_uids):
            continue
        unit = next((p for p in plans[key].pod_cliques if p.name == meta["name"]), None)
        if unit is None or ready[meta["uid"]] >= unit.min_available:
            continue
        breaches.append(Breach(key, meta["name"], meta["uid"], ready[meta["uid"]], unit.min_available,
                               _below_since(pod_events, meta["uid"], unit.min_available)))
    return breaches


def _below_since(pod_events: list[PodEvent], pclq_uid: str, min_available: int) -> float | None:
    ready: dict[str, bool] = {}
    since: float | None = None
    for event in pod_events:
        pod = event.pod
        if pod.owner_uid != pclq_uid:
            continue
        if event.type == "DELETED":
            ready.pop(pod.uid, None)
        else:
            ready[pod.uid] = pod.ready and not pod.deleting
        count = sum(ready.values())
        if count < min_available and since is None:
            since = event.at
        elif count >= min_available:
            since = None
    return since


def none_missing(breaches: list[Breach], digests: dict[ReplicaKey, WorkflowDigest],
                 delays: dict[tuple[ReplicaKey, str], timedelta], now: float, grace: float) -> Findings:
    """A breach of an incarnation the workflow saw available that has lasted longer than twice its delay (a
    PCSG-replica clock may be superseded by its PCSG's) plus `grace` is a termination that went missing."""
    found = Findings()
    for breach in breaches:
        digest = digests.get(breach.key)
        if digest is None or breach.uid not in digest.available_uids:
            found.counts["breaches_never_available"] += 1
            continue
        delay = delays[(breach.key, breach.pclq)].total_seconds()
        # No drop in our stream yet: the listing is a moment ahead of the watch, the breach has just begun.
        lasted = now - breach.since if breach.since is not None else 0.0
        if lasted > 2 * delay + grace:
            found.violate(NONE_MISSING, f"missing/{breach.uid}", f"{breach.key}: PodClique {breach.pclq} "
                          f"({breach.uid}) has {breach.ready} of {breach.min_available} pods Ready for {lasted:.0f}s "
                          f"(delay {delay:.0f}s); the workflow saw it available, yet it was never terminated")
        else:
            found.counts["breaches_within_delay_at_check"] += 1
    return found


# --- foreign ---------------------------------------------------------------------------------------------------


def foreign_view(obj: JSON) -> JSON:
    """What nobody but the object's owner may change: identity, metadata, spec (pods) or data (ConfigMaps). The
    control plane may still write a pod's status (kube-controller-manager marks pods of a node it cannot hear from
    NotReady; KWOK, the kubelet here, marks them Ready again), which changes the resourceVersion and nothing else."""
    meta = _meta(obj)
    return {
        "uid": meta.get("uid"),
        "labels": meta.get("labels") or {},
        "annotations": meta.get("annotations") or {},
        "ownerReferences": meta.get("ownerReferences") or [],
        "finalizers": meta.get("finalizers") or [],
        "deletionTimestamp": meta.get("deletionTimestamp"),
        "spec": obj.get("spec"),
        "data": obj.get("data"),
    }


def foreign_untouched(before: dict[str, JSON], after: dict[str, JSON | None]) -> Findings:
    """UID and resourceVersion unchanged; where the resourceVersion moved, only the control plane wrote status and
    nothing of ours touched the object (no managedFields entry of our field manager)."""
    found = Findings()
    for name, was in before.items():
        found.counts["foreign_checked"] += 1
        now = after.get(name)
        if now is None:
            found.violate(FOREIGN, f"gone/{name}", f"foreign {name} ({_meta(was).get('uid')}) was deleted")
            continue
        if _meta(now).get("resourceVersion") == _meta(was).get("resourceVersion"):
            continue
        found.counts["foreign_status_writes_by_control_plane"] += 1
        view_was, view_now = foreign_view(was), foreign_view(now)
        changed = sorted(k for k in view_was if view_was[k] != view_now[k])
        if changed:
            found.violate(FOREIGN, f"changed/{name}/{','.join(changed)}", f"foreign {name}: {', '.join(changed)} "
                          f"changed: {[(view_was[k], view_now[k]) for k in changed]}")
        ours = [m for m in _meta(now).get("managedFields") or [] if m.get("manager") == PRODUCT_FIELD_MANAGER]
        if ours:
            found.violate(FOREIGN, f"written/{name}", f"foreign {name} was written by {PRODUCT_FIELD_MANAGER}: {ours}")
    return found


async def replayable(replayer: Replayer, histories: dict[str, WorkflowHistory],
                     keep_in: Path | None = None) -> Findings:
    """Every history read since the last check replays with this code. A nondeterminism error would otherwise show
    only when a worker without the run cached next touches it (as in round 52 of seed 1, where it then stuck).

    A history that does not replay is written to `keep_in` (`unreplayable-<run id>.json`, readable by
    tests/histories.py's `load`), and the violation names the file: the run it came from is gone with the run's stack,
    and an incident fixture needs the history itself (tests/fixtures/incidents/README.md)."""
    found = Findings()
    for run_id, history in histories.items():
        if not has_a_workflow_task(history):  # read before its first task: nothing to replay (worker/doctor.py)
            found.counts["histories_without_a_task"] += 1
            continue
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        # The SDK's deadlock detector is wall-clock (2 s without a yield): on a starved machine a replay can trip it
        # in a garbage-collector callback. Replayed again, twice at most; only a repeated trip counts.
        for _ in range(2):
            if result.replay_failure is None or DEADLOCK_DETECTED not in str(result.replay_failure):
                break
            found.counts["replays_retried_after_deadlock_detector"] += 1
            result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        found.counts["histories_replayed"] += 1
        if result.replay_failure is not None:
            kept = (f" (history kept in {write_history(history, keep_in / f'unreplayable-{run_id}.json')})"
                    if keep_in is not None else "")
            found.violate(REPLAYABLE, f"replay/{run_id}", f"{history.workflow_id} run {run_id} does not replay: "
                                                          f"{str(result.replay_failure).splitlines()[0][:300]}{kept}")
    return found

