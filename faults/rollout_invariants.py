"""The rolling-update invariants of a fault run (issue 12), pure functions over our pod watch, the workflow
histories (the recreate_for_update activities: which pods and PCSG-replica PodCliques a rollout deleted) and live
objects.

| invariant        | from                                   | holds when                                              |
|------------------|----------------------------------------|---------------------------------------------------------|
| rollout-budget   | pod watch (stream order), histories    | at no instant more than maxUnavailable units of one     |
|                  |                                        | PodClique (pods) or PCSG (PCSG replicas) are down       |
|                  |                                        | because of the rollout, nor units of two replicas of    |
|                  |                                        | one PCS                                                 |
| rollout-once     | pod watch, histories                   | a pod the rollout deleted alone is never deleted twice  |
|                  |                                        | at one template hash nor replaced at the hash it had;   |
|                  |                                        | a PCSG replica it recreated had at least one pod that   |
|                  |                                        | comes back at another hash (the replica is Grove's      |
|                  |                                        | unit: pods already updated, e.g. after a lost node, go  |
|                  |                                        | with it)                                                |
| rollout-complete | live PCS and pods, settled rounds only | updatedReplicas == replicas and every pod of ours at    |
|                  |                                        | its clique's current pod-template hash                  |

"Down because of the rollout": a unit (a standalone pod, or a whole PCSG replica) the rollout deleted while it was
available, from the first event showing it going until a pod of the same name (a new UID) is Ready. The product
decides a step on pods it read just before scheduling it and recreates unavailable outdated units first, outside the
budget (grove.rollout.replica_step), so a unit costs budget only if it was available at every event from that read
(the observe or ensure activity before the step, from the history) until it went. Available: every pod name seen in the unit has a live,
Ready, not deleting incarnation; a pod the pod GC removed with its lost node is missing, so its unit is unavailable.
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
DECISION_SLACK_S = 5.0  # a step without a read in its history: decided on pods read up to this long before it
WATCH_SKEW_S = 1.0  # our pod watch and the Temporal server's clock: one machine, events arrive late by up to this


@dataclass(frozen=True)
class _Down:
    key: ReplicaKey
    group: str  # budget group: PodClique name, or PCSG name
    unit: str  # pod name, or PCSG replica


@dataclass(frozen=True)
class _Step:
    read: float  # when the read the step was decided on began
    scheduled: float  # when the step's deletions were scheduled


def rollout_deleted(digests: Mapping[ReplicaKey, WorkflowDigest]) -> tuple[dict[str, _Step], dict[str, _Step]]:
    """(pod UID, PodClique UID) -> the rollout step that asked to delete it. Its read is the observe or ensure
    activity before it in the history (DECISION_SLACK_S before the step where the history shows none)."""
    pods: dict[str, _Step] = {}
    cliques: dict[str, _Step] = {}
    for digest in digests.values():
        for call in digest.recreations:
            scheduled = call.scheduled_at.timestamp()
            step = _Step(call.read_at.timestamp() if call.read_at else scheduled - DECISION_SLACK_S, scheduled)
            asked_pods, asked_cliques = call.asked()
            for uid in asked_pods.values():
                pods.setdefault(uid, step)
            for uid in asked_cliques.values():
                cliques.setdefault(uid, step)
    return pods, cliques


def _unit(key: ReplicaKey, pod: PodState) -> _Down:
    pcsg = pod.labels.get(names.LABEL_PCSG)
    if pcsg:
        return _Down(key, pcsg, pod.labels.get(names.LABEL_PCSG_REPLICA_INDEX, "?"))
    return _Down(key, pod.labels.get(names.LABEL_PODCLIQUE, "?"), pod.name)


class _Units:
    """Which units are available, from the pod stream: a unit is available when every pod name ever seen in it has
    a live incarnation that is Ready and not deleting (a pod the pod GC removed with its lost node is missing, so its
    unit is not). For the workload's PCSGs (minAvailable == replicas in every clique) that is the product's rule."""

    def __init__(self) -> None:
        self.names: dict[_Down, set[str]] = defaultdict(set)
        self.live: dict[_Down, dict[str, dict[str, PodState]]] = defaultdict(lambda: defaultdict(dict))
        self.last_unavailable: dict[_Down, float] = {}

    def available(self, unit: _Down) -> bool:
        live = self.live[unit]
        return all(any(s.ready and not s.deleting for s in live[name].values()) for name in self.names[unit])

    def available_since(self, unit: _Down, since: float) -> bool:
        """Available now and at every event since `since`."""
        return self.available(unit) and self.last_unavailable.get(unit, float("-inf")) < since

    def apply(self, unit: _Down, event: PodEvent) -> None:
        pod = event.pod
        self.names[unit].add(pod.name)
        if event.type == "DELETED":
            self.live[unit][pod.name].pop(pod.uid, None)
        else:
            self.live[unit][pod.name][pod.uid] = pod
        if not self.available(unit):
            self.last_unavailable[unit] = event.at


def rollout_budget_and_once(pod_events: Iterable[PodEvent], digests: Mapping[ReplicaKey, WorkflowDigest],
                            max_unavailable: int = names.DEFAULT_MAX_UNAVAILABLE) -> Findings:
    """Replays our pod stream with the rollout's deletions (by UID, from the histories) marked."""
    found = Findings()
    pod_uids, clique_uids = rollout_deleted(digests)
    units = _Units()
    last: dict[str, PodState] = {}  # uid -> last state seen
    down: dict[str, _Down] = {}  # pod name -> unit it keeps down, until a new incarnation of the name is Ready
    deleted_hash: dict[str, str] = {}  # pod name -> hash of the incarnation the rollout deleted alone, last
    charged: dict[tuple[_Down, _Step], bool] = {}  # (PCSG replica, step) -> whether its deletion cost budget
    awaiting: dict[str, tuple[_Down, _Step, str]] = {}  # pod name -> (unit, step, hash) of a whole-unit deletion
    unit_pending: dict[tuple[_Down, _Step], int] = defaultdict(int)  # replacements not yet seen
    unit_changed: dict[tuple[_Down, _Step], bool] = {}  # whether some replacement came at another hash
    counted: set[str] = set()  # rollout-deleted UIDs already handled
    seen_pairs: set[tuple[str, str]] = set()
    max_units = max_replicas = 0
    for event in pod_events:
        pod = event.pod
        key = _labels_key(pod.labels)
        if key is None or not pod.ours:
            continue
        unit = _unit(key, pod)
        before = last.get(pod.uid)
        last[pod.uid] = pod
        going = pod.deleting or event.type == "DELETED"
        template = pod.labels.get(names.LABEL_POD_TEMPLATE_HASH, "")
        # A pod of a PodClique the rollout deleted is the rollout's only if it went after the step was scheduled
        # (an incarnation a lost node took earlier had the same owner). No slack: the deletion is issued after the
        # server stamped the step, on this machine's clock, and our watch sees it later still; a pod the pod GC
        # removed a moment before the step is a fault's (seed 14 round 1: with 1 s of slack it was charged).
        step = pod_uids.get(pod.uid)
        whole_unit = step is None and pod.owner_uid in clique_uids and (before is None or not before.deleting) \
            and event.at >= clique_uids[pod.owner_uid].scheduled
        if whole_unit:
            step = clique_uids[pod.owner_uid]
        if step is not None and pod.uid not in counted and going:
            counted.add(pod.uid)
            found.counts["rollout_pod_deletions_checked"] += 1
            # The step was decided on a snapshot read before it was scheduled: a unit unavailable at any instant
            # from that read on may have been picked as unavailable, which costs nothing.
            costs = units.available_since(unit, step.read - WATCH_SKEW_S)
            if whole_unit:
                costs = charged.setdefault((unit, step), costs)
                awaiting[pod.name] = (unit, step, template)
                unit_pending[(unit, step)] += 1
                unit_changed.setdefault((unit, step), False)
            else:
                pair = (pod.name, template)
                if pair in seen_pairs:
                    found.violate(ROLLOUT_ONCE, f"twice/{pod.name}/{template}", f"{key}: the rollout deleted pod "
                                  f"{pod.name} twice at template hash {template} (second: {pod.uid})")
                seen_pairs.add(pair)
                deleted_hash[pod.name] = template
            if costs:
                down[pod.name] = unit
        elif not going and pod.uid not in counted:
            # the replacement of a pod the rollout deleted alone (popped: only its first replacement is judged)
            if before is None and pod.name in deleted_hash and template == deleted_hash.pop(pod.name):
                found.violate(ROLLOUT_ONCE, f"same/{pod.name}/{template}", f"{key}: pod {pod.name} was deleted "
                              f"by the rollout at hash {template} and recreated at the same hash ({pod.uid})")
            if before is None and pod.name in awaiting:  # the replacement of a pod of a recreated PCSG replica
                was_unit, was_step, was_hash = awaiting.pop(pod.name)
                unit_pending[(was_unit, was_step)] -= 1
                if template != was_hash:
                    unit_changed[(was_unit, was_step)] = True
            if pod.ready:
                down.pop(pod.name, None)
        if event.type == "DELETED":
            last.pop(pod.uid, None)
        units.apply(unit, event)
        # the budget at this instant
        units_down: dict[tuple[ReplicaKey, str], set[str]] = defaultdict(set)
        replicas: dict[str, set[int]] = defaultdict(set)
        for which in down.values():
            units_down[(which.key, which.group)].add(which.unit)
            replicas[which.key[0]].add(which.key[1])
        for (replica, group), which_units in units_down.items():
            max_units = max(max_units, len(which_units))
            if len(which_units) > max_unavailable:
                found.violate(ROLLOUT_BUDGET, f"units/{replica}/{group}/{len(which_units)}", f"{replica}: "
                              f"{len(which_units)} units of {group} down because of the rollout at once "
                              f"({sorted(which_units)}), maxUnavailable {max_unavailable} (pod event {event.seq})")
        for pcs, indices in replicas.items():
            max_replicas = max(max_replicas, len(indices))
            if len(indices) > 1:
                found.violate(ROLLOUT_BUDGET, f"replicas/{pcs}/{sorted(indices)}", f"{pcs}: replicas "
                              f"{sorted(indices)} down because of the rollout at once (pod event {event.seq})")
    # A recreated PCSG replica takes its pods already at the target along (Grove's unit), so one pod coming back at
    # its own hash is expected; a replica whose every pod came back at the hash it had was not outdated at all.
    for (unit, step), changed in unit_changed.items():
        if not changed and unit_pending[(unit, step)] == 0:
            found.violate(ROLLOUT_ONCE, f"unit/{unit.key}/{unit.group}/{unit.unit}/{step.scheduled}", f"{unit.key}: the rollout "
                          f"recreated {unit.group} replica {unit.unit} though every pod of it was already at its hash")
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


def held_by_rollout(pclq: JSON, rolling: set[str]) -> bool:
    """A PodClique a rollout still waits on that no gang termination will ever clear: its PCS (in `rolling`) has not
    finished its rollout and the clique reads NeverAvailable. A clique the rollout recreated is never-available
    until the replica's turn has seen it Ready (seed 002: a half-updated clique's pods turning Ready do not set
    was-available), so a pod broken before that holds the turn as a failing readiness probe would: the rollout
    waits, then halts at progressDeadline, and nothing is terminated (docs/semantics.md)."""
    if (_meta(pclq).get("labels") or {}).get(names.LABEL_PART_OF) not in rolling:
        return False
    return any(c.get("type") == names.CONDITION_MIN_AVAILABLE_BREACHED and c.get("reason") == names.REASON_NEVER_AVAILABLE
               for c in (pclq.get("status") or {}).get("conditions") or [])
