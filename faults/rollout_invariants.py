"""The rolling-update invariants of a fault run (issue 12), pure functions over our pod watch, the workflow
histories (the recreate_for_update activities: which pods and PCSG-replica PodCliques a rollout deleted) and live
objects.

| invariant        | from                                   | holds when                                              |
|------------------|----------------------------------------|---------------------------------------------------------|
| rollout-budget   | pod watch (stream order), histories    | at no instant more than maxUnavailable units of one     |
|                  |                                        | PodClique (pods) or PCSG (PCSG replicas) are down       |
|                  |                                        | because of the rollout, nor units of two replicas of    |
|                  |                                        | one PCS                                                 |
| rollout-once     | pod watch, histories                   | the rollout never deletes two incarnations of one pod   |
|                  |                                        | at the same template hash, and never one whose          |
|                  |                                        | replacement has the hash it had                         |
| rollout-complete | live PCS and pods, settled rounds only | updatedReplicas == replicas and every pod of ours at    |
|                  |                                        | its clique's current pod-template hash                  |

"Down because of the rollout": a pod the rollout deleted while it was Ready, from the first event showing it
deleting until a pod of the same name (a new UID) is Ready. Deleting a pod that was already not Ready takes nothing
away (grove.rollout.replica_step recreates those first, outside the budget), so it is not counted. A PCSG replica is
one unit: down while any of its pods is.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from activities.kubeapi import JSON
from faults.history import WorkflowDigest
from faults.invariants import Findings, ReplicaKey, _labels_key, _meta, _ours
from faults.recorder import PodEvent, PodState
from grove import names
from grove.rollout import pod_template_hashes
from grove.validation import parse_pcs

ROLLOUT_BUDGET = "rollout-budget"
ROLLOUT_ONCE = "rollout-once"
ROLLOUT_COMPLETE = "rollout-complete"
ROLLOUT_INVARIANTS = (ROLLOUT_BUDGET, ROLLOUT_ONCE, ROLLOUT_COMPLETE)


@dataclass(frozen=True)
class _Down:
    key: ReplicaKey
    group: str  # budget group: PodClique name, or PCSG name
    unit: str  # pod name, or PCSG replica


def rollout_deleted(digests: Mapping[ReplicaKey, WorkflowDigest]) -> tuple[set[str], dict[str, float]]:
    """(pod UIDs, PodClique UID -> when the step was scheduled) some rollout step of a replica workflow asked to
    delete."""
    pods: set[str] = set()
    cliques: dict[str, float] = {}
    for digest in digests.values():
        for call in digest.recreations:
            pods |= set(call.request.pods.values())
            for uid in call.request.cliques.values():
                cliques.setdefault(uid, call.scheduled_at.timestamp())
    return pods, cliques


def _unit(key: ReplicaKey, pod: PodState) -> _Down:
    pcsg = pod.labels.get(names.LABEL_PCSG)
    if pcsg:
        return _Down(key, pcsg, pod.labels.get(names.LABEL_PCSG_REPLICA_INDEX, "?"))
    return _Down(key, pod.labels.get(names.LABEL_PODCLIQUE, "?"), pod.name)


def rollout_budget_and_once(pod_events: Iterable[PodEvent], digests: Mapping[ReplicaKey, WorkflowDigest],
                            max_unavailable: int = names.DEFAULT_MAX_UNAVAILABLE) -> Findings:
    """Replays our pod stream with the rollout's deletions (by UID, from the histories) marked."""
    found = Findings()
    pod_uids, clique_uids = rollout_deleted(digests)
    unit_was_available: dict[tuple[ReplicaKey, str, str, str], bool] = {}  # (key, pcsg, replica, clique uid)
    last: dict[str, PodState] = {}  # uid -> last state seen
    down: dict[str, _Down] = {}  # pod name -> unit it keeps down, until a new incarnation of the name is Ready
    deleted_hash: dict[str, str] = {}  # pod name -> hash of the incarnation the rollout deleted last
    counted: set[str] = set()  # rollout-deleted UIDs already handled
    seen_pairs: set[tuple[str, str]] = set()
    max_units = max_replicas = 0
    for event in pod_events:
        pod = event.pod
        key = _labels_key(pod.labels)
        if key is None or not pod.ours:
            continue
        before = last.get(pod.uid)
        last[pod.uid] = pod
        # A pod of a PodClique the rollout deleted is the rollout's only if it went after the step was scheduled
        # (an incarnation a lost node took earlier had the same owner).
        by_rollout = pod.uid in pod_uids or (pod.owner_uid in clique_uids and (before is None or not before.deleting)
                                             and event.at >= clique_uids[pod.owner_uid] - 1.0)
        if by_rollout and pod.uid not in counted and (pod.deleting or event.type == "DELETED"):
            counted.add(pod.uid)
            found.counts["rollout_pod_deletions_checked"] += 1
            template = pod.labels.get(names.LABEL_POD_TEMPLATE_HASH, "")
            pair = (pod.name, template)
            if pair in seen_pairs:
                found.violate(ROLLOUT_ONCE, f"twice/{pod.name}/{template}", f"{key}: the rollout deleted pod "
                              f"{pod.name} twice at template hash {template} (second: {pod.uid})")
            seen_pairs.add(pair)
            deleted_hash[pod.name] = template
            unit = _unit(key, pod)
            if pod.uid in pod_uids:
                if before is not None and before.ready and not before.deleting:
                    down[pod.name] = unit
            else:
                # A PCSG replica costs budget only if it was available when the rollout deleted it: decided at its
                # first pod seen going, from the last state of every pod of the unit.
                decided = (key, unit.group, unit.unit, pod.owner_uid)
                if decided not in unit_was_available:
                    members = [before if p.uid == pod.uid else p for p in last.values()
                               if p is not None and _labels_key(p.labels) == key and _unit(key, p) == unit
                               and p.owner_uid in clique_uids]
                    unit_was_available[decided] = all(m is not None and m.ready and not m.deleting for m in members)
                if unit_was_available[decided]:
                    down[pod.name] = unit
        elif event.type != "DELETED" and not pod.deleting and pod.name in deleted_hash and pod.uid not in counted:
            template = pod.labels.get(names.LABEL_POD_TEMPLATE_HASH, "")
            was = deleted_hash.get(pod.name)
            if before is None and was and template == was:
                found.violate(ROLLOUT_ONCE, f"same/{pod.name}/{template}", f"{key}: pod {pod.name} was deleted by "
                              f"the rollout at hash {template} and recreated at the same hash ({pod.uid})")
            if pod.ready:
                down.pop(pod.name, None)
        if event.type == "DELETED":
            last.pop(pod.uid, None)
        # the budget at this instant
        units: dict[tuple[ReplicaKey, str], set[str]] = defaultdict(set)
        replicas: dict[str, set[int]] = defaultdict(set)
        for unit in down.values():
            units[(unit.key, unit.group)].add(unit.unit)
            replicas[unit.key[0]].add(unit.key[1])
        for (replica, group), which in units.items():
            max_units = max(max_units, len(which))
            if len(which) > max_unavailable:
                found.violate(ROLLOUT_BUDGET, f"units/{replica}/{group}/{len(which)}", f"{replica}: {len(which)} "
                              f"units of {group} down because of the rollout at once ({sorted(which)}), "
                              f"maxUnavailable {max_unavailable} (pod event {event.seq})")
        for pcs, indices in replicas.items():
            max_replicas = max(max_replicas, len(indices))
            if len(indices) > 1:
                found.violate(ROLLOUT_BUDGET, f"replicas/{pcs}/{sorted(indices)}", f"{pcs}: replicas "
                              f"{sorted(indices)} down because of the rollout at once (pod event {event.seq})")
    found.counts["rollout_max_units_down"] = max_units
    found.counts["rollout_max_replicas_down"] = max_replicas
    return found


def rollout_incomplete(pcses: Iterable[JSON], pods: Iterable[JSON]) -> list[str]:
    """Why the rollouts of these live PCSes are not complete (empty when they are): updatedReplicas below
    replicas, or a pod of ours not at its clique's pod-template hash of the current template."""
    problems: list[str] = []
    pods = list(pods)
    for obj in pcses:
        name = _meta(obj)["name"]
        model, errors = parse_pcs(obj)
        if model is None:
            problems.append(f"PodCliqueSet {name} does not parse: {errors}")
            continue
        wanted = pod_template_hashes(model)
        replicas = int((obj.get("spec") or {}).get("replicas") or 0)
        updated = int((obj.get("status") or {}).get("updatedReplicas") or 0)
        if updated != replicas:
            problems.append(f"PodCliqueSet {name}: updatedReplicas {updated} of {replicas}")
        for pod in pods:
            meta = _meta(pod)
            labels = meta.get("labels") or {}
            controller: JSON = next((r for r in meta.get("ownerReferences") or [] if r.get("controller")), {})
            if (labels.get(names.LABEL_PART_OF) != name or not _ours(pod) or meta.get("deletionTimestamp")
                    or controller.get("kind") != names.KIND_PODCLIQUE):
                continue  # look-alikes carry our labels, not our owner
            pclq = labels.get(names.LABEL_PODCLIQUE, "")
            clique = next((c for c in wanted if pclq.endswith(f"-{c}")), None)
            have = labels.get(names.LABEL_POD_TEMPLATE_HASH)
            if clique is not None and have != wanted[clique]:
                problems.append(f"pod {meta['name']} at hash {have}, its clique {clique} is at {wanted[clique]}")
    return problems


def rollout_complete(pcses: Iterable[JSON], pods: Iterable[JSON], round_: int) -> Findings:
    found = Findings()
    pcses = list(pcses)
    found.counts["rollouts_checked_complete"] += len(pcses)
    for problem in rollout_incomplete(pcses, pods):
        found.violate(ROLLOUT_COMPLETE, f"incomplete/{round_}/{problem}", problem)
    return found


def masked(pclq: JSON) -> bool:
    """A PodClique whose breach the rolling update masks (MinAvailableBreached Unknown/UpdateInProgress)."""
    for condition in (pclq.get("status") or {}).get("conditions") or []:
        if condition.get("reason") == names.REASON_UPDATE_IN_PROGRESS and condition.get("type") in (
                names.CONDITION_MIN_AVAILABLE_BREACHED, names.CONDITION_UPDATE_IN_PROGRESS):
            return True
    return False
