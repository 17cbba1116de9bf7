"""Activities of rolling updates (DESIGN §4.9): read a whole PCS for the rollout workflow, recreate what a replica
workflow's step chose, mirror the PCS's update status, record rollout Events.

Same rules as activities/replica.py: deletes carry UID preconditions from the state the workflow read this round,
only our objects are touched, outages are retried and invalid requests are not.
"""

from __future__ import annotations

import functools
import logging
from collections import defaultdict
from datetime import UTC, datetime

from temporalio import activity

from activities import events
from activities.fanout import fan_out
from activities.kubeapi import JSON, PODCLIQUES, PODCLIQUESETS, PODS, SCALINGGROUPS, Kube, ours, terminating
from activities.metrics import CACHED_READS
from activities.observe import ClusterView, SpecReading, clique_states, name_of, read_pods, read_spec, uid_of
from activities.replica import delete_incarnations, pcs_still_ours, stale_decision, translating_errors
from activities.status import merged_conditions
from activities.watch_cache import NotFresh, WatchCache
from grove import names
from grove.rollout import (
    CliqueProgress,
    ReplicaRollout,
    replica_available,
    replica_outdated,
    replica_step,
    replica_updated,
    rollout_spec,
)
from workflows.contract import (
    MIRROR_ROLLOUT_STATUS,
    OBSERVE_ROLLOUT,
    OBSERVE_ROLLOUT_CACHED,
    RECORD_ROLLOUT_EVENT,
    RECREATE_FOR_UPDATE,
)
from workflows.messages import ConditionMirror, PcsState, RecreateRequest, RecreateResult, ReplicaRef
from workflows.presentation import rollout_progress
from workflows.rollout_messages import PcsRef, RolloutEvent, RolloutSnapshot, RolloutStatusMirror

log = logging.getLogger(__name__)


class RolloutActivities:
    def __init__(self, kube: Kube, cache: WatchCache | None = None) -> None:
        self.kube = kube
        self.cache = cache

    @activity.defn(name=OBSERVE_ROLLOUT)
    @translating_errors("read PodCliqueSet for its rollout")
    def observe_rollout(self, ref: PcsRef) -> RolloutSnapshot:
        pcs = self.kube.get(PODCLIQUESETS, ref.namespace, ref.pcs)
        replica0 = ReplicaRef(namespace=ref.namespace, pcs=ref.pcs, pcs_uid=ref.pcs_uid, replica=0)
        spec = read_spec(pcs, replica0)
        if pcs is None or spec.state is not PcsState.PRESENT or spec.pcs is None:
            return RolloutSnapshot(pcs_state=spec.state.value, problems=spec.problems)
        selector = f"{names.LABEL_MANAGED_BY}={names.MANAGED_BY},{names.LABEL_PART_OF}={ref.pcs}"
        pclqs, pods, pcsgs = fan_out([functools.partial(self.kube.list_items, r, ref.namespace,
                                                        label_selector=selector)
                                      for r in (PODCLIQUES, PODS, SCALINGGROUPS)])
        return rollout_snapshot(pcs, spec, replica0, pclqs, pods, pcsgs)

    @activity.defn(name=OBSERVE_ROLLOUT_CACHED)
    @translating_errors("read PodCliqueSet for its rollout")
    def observe_rollout_cached(self, ref: PcsRef) -> RolloutSnapshot:
        """An idle rollout's periodic read, from the worker's watch cache: no apiserver request for a settled PCS.
        The apiserver is read where the cache cannot answer (not synced) and wherever the answer would end the
        workflow or is not this PCS's (absent, replaced, being deleted), as for a replica's cached observe."""
        found = None
        if self.cache is not None:
            try:
                found = self.cache.podcliqueset_objects(ref.namespace, ref.pcs, (PODCLIQUES, PODS, SCALINGGROUPS))
            except NotFresh as why:
                log.debug("rollout of %s/%s read from the apiserver: %s", ref.namespace, ref.pcs, why)
            CACHED_READS.labels("apiserver" if found is None else "cache").inc()
        if found is None:
            return self.observe_rollout(ref)
        pcs, objects = found
        if pcs is None or uid_of(pcs) != ref.pcs_uid or terminating(pcs):
            return self.observe_rollout(ref)
        replica0 = ReplicaRef(namespace=ref.namespace, pcs=ref.pcs, pcs_uid=ref.pcs_uid, replica=0)
        spec = read_spec(pcs, replica0)
        if spec.state is not PcsState.PRESENT or spec.pcs is None:
            return RolloutSnapshot(pcs_state=spec.state.value, problems=spec.problems)
        mine = [[obj for obj in objects[r.kind] if ours(obj)] for r in (PODCLIQUES, PODS, SCALINGGROUPS)]
        return rollout_snapshot(pcs, spec, replica0, *mine)

    @activity.defn(name=RECREATE_FOR_UPDATE)
    @translating_errors("recreate for a rolling update")
    def recreate_for_update(self, request: RecreateRequest) -> RecreateResult:
        """Delete the chosen outdated pods and PCSG replicas' PodCliques, each only if still the object read."""
        ref = request.ref
        if not pcs_still_ours(self.kube, ref):
            return RecreateResult(already_gone=(*request.pods, *request.cliques))
        pods, cliques, deferred = self._still_picked(request)
        pclqs_deleted, pclqs_gone = delete_incarnations(self.kube, ref.namespace, cliques)
        deleted = [f"PodClique/{name}" for name in pclqs_deleted]
        gone = [f"PodClique/{name}" for name in pclqs_gone]
        for name, uid in sorted(pods.items()):
            ok = self.kube.delete(PODS, ref.namespace, name, uid=uid)
            (deleted if ok else gone).append(f"Pod/{name}")
        log.info("rolling update of %s to %s: deleted %s (already gone: %s; deferred: %s)", ref,
                 request.generation_hash, deleted, gone, deferred)
        if deleted:
            events.record(self.kube, ref, names.EVENT_ROLLOUT_STEP,
                          f"recreating {', '.join(request.units)} with the pod template of generation "
                          f"{request.generation_hash}; deleted {', '.join(deleted)}"
                          + (f"; deferred {', '.join(deferred)}" if deferred else ""))
        return RecreateResult(deleted=tuple(deleted), already_gone=tuple(gone), deferred=tuple(deferred))

    def _still_picked(self, request: RecreateRequest) -> tuple[dict[str, str], dict[str, str], list[str]]:
        """The pods and PodCliques of the request that a step decided again now still picks (same UIDs), and those
        it no longer does. Decided again only when the step's read is old or this attempt is a retry: an attempt
        retried after kube-apiserver was unreachable would otherwise go past maxUnavailable where pods turned
        NotReady meanwhile (their kubelets report once kube-apiserver is back)."""
        recheck = request.recheck
        if recheck is None or stale_decision(recheck.read_at) is None:
            return request.pods, request.cliques, []
        states = clique_states(read_pods(self.kube, request.ref), targets=recheck.targets)
        step = replica_step(recheck.topology, rollout_progress(states), recheck.spec)
        pods = {name: uid for name, uid in request.pods.items() if step.delete_pods.get(name) == uid}
        cliques = {name: uid for name, uid in request.cliques.items() if step.delete_cliques.get(name) == uid}
        deferred = ([f"PodClique/{name}" for name in sorted(request.cliques) if name not in cliques]
                    + [f"Pod/{name}" for name in sorted(request.pods) if name not in pods])
        return pods, cliques, deferred

    @activity.defn(name=MIRROR_ROLLOUT_STATUS)
    @translating_errors("mirror rollout status")
    def mirror_rollout_status(self, request: RolloutStatusMirror) -> bool:
        ref = request.ref
        obj = self.kube.get(PODCLIQUESETS, ref.namespace, ref.pcs)
        if obj is None or uid_of(obj) != ref.pcs_uid:
            return False
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        status = dict(obj.get("status") or {})
        condition = ConditionMirror(type=names.CONDITION_UPDATE_IN_PROGRESS, status=request.condition_status,
                                    reason=request.condition_reason, message=request.condition_message[:1000])
        desired = {
            **status,
            "updatedReplicas": request.updated_replicas,
            "currentGenerationHash": request.generation_hash,
            "conditions": merged_conditions(list(status.get("conditions") or []), (condition,), now),
        }
        if request.update_progress is not None:
            desired["updateProgress"] = request.update_progress
        if desired == status:
            return False
        patch = {k: desired[k] for k in ("updatedReplicas", "currentGenerationHash", "conditions")}
        # A merge patch keeps keys it does not name: a key no longer wanted (currentlyUpdating once a turn ended) is
        # named with null; None for the whole object removes it.
        had = status.get("updateProgress") or {}
        patch["updateProgress"] = None if request.update_progress is None else {
            **{key: None for key in had if key not in request.update_progress}, **request.update_progress}
        # The conditions list is replaced whole (merge patch): the resourceVersion makes a concurrent writer of
        # another condition (SpecValid) a conflict, retried with a fresh read, instead of a lost write.
        version = obj["metadata"].get("resourceVersion")
        self.kube.patch(PODCLIQUESETS, ref.namespace, ref.pcs,
                        {"metadata": {"resourceVersion": version}, "status": patch}, subresource="status")
        return True

    @activity.defn(name=RECORD_ROLLOUT_EVENT)
    def record_rollout_event(self, request: RolloutEvent) -> None:
        ref = request.ref
        events.record_for_pcs(self.kube, ref.namespace, ref.pcs, ref.pcs_uid, request.reason, request.message,
                              type=request.type)


def _clique_updated(state: CliqueProgress | None) -> bool:
    return state is not None and not state.terminating and not state.outdated


def rollout_snapshot(pcs: JSON, spec: SpecReading, replica0: ReplicaRef, pclqs: list[JSON], pods: list[JSON],
                     pcsgs: list[JSON]) -> RolloutSnapshot:
    """What the rollout workflow decides on: a PCS read present and valid (`spec`), and our objects of it, every
    replica's, whether listed from the apiserver or taken from the watch cache."""
    # pcsgs={}: the counts stored on the replica's own PCSGs and PodCliques (what `/scale` wrote, issue 13) are
    # the replica's size, as for the replica workflow's plan; the template's counts only seed new objects.
    by_replica: dict[str, ClusterView] = defaultdict(lambda: ClusterView(pcs=pcs, pcsgs={}))
    for objs, kind in ((pclqs, "pclqs"), (pods, "pods"), (pcsgs, "pcsgs")):
        for obj in objs:
            index = (obj["metadata"].get("labels") or {}).get(names.LABEL_PCS_REPLICA_INDEX, "")
            getattr(by_replica[index], kind)[name_of(obj)] = obj
    replicas: list[ReplicaRollout] = []
    counts = [0, 0, 0, 0]  # updated PCLQs, PCLQs, updated PCSGs, PCSGs (standalone PCLQs; PCSGs whole)
    generation = ""
    strategy = names.STRATEGY_ROLLING_RECREATE
    for index in range(spec.wanted_replicas):
        view = by_replica[str(index)]
        reading = read_spec(pcs, replica0.model_copy(update={"replica": index}), counts=view.counts())
        assert reading.plan is not None and reading.pcs is not None
        topology = reading.plan.topology()
        rollout = rollout_spec(reading.pcs, topology)
        generation, strategy = rollout.generation_hash, rollout.strategy
        states = rollout_progress(clique_states(view, reading.plan))
        replicas.append(ReplicaRollout(index=index, updated=replica_updated(topology, states),
                                       available=replica_available(topology, states),
                                       outdated=replica_outdated(states)))
        for unit in topology.standalone():
            counts[1] += 1
            counts[0] += _clique_updated(states.get(unit.name))
        for group in topology.scaling_groups:
            counts[3] += 1
            members = [u for j in range(group.replicas) for u in topology.members(group.name, j)]
            counts[2] += all(_clique_updated(states.get(u.name)) for u in members)
    return RolloutSnapshot(
        pcs_state=spec.state.value, valid=True, strategy=strategy, generation_hash=generation,
        wanted_replicas=spec.wanted_replicas, replicas=tuple(replicas), updated_pod_cliques=counts[0],
        total_pod_cliques=counts[1], updated_scaling_groups=counts[2], total_scaling_groups=counts[3],
    )
