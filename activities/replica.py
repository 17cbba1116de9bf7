"""Activities of the replica workflow: every Kubernetes read and write it needs.

Rules all of them keep:
- Idempotent: a retry after a lost response creates no duplicate and deletes nothing twice (deterministic names,
  create-if-absent, deletes with UID preconditions).
- Only our objects: nothing without our managed-by label and the expected owner is changed or deleted.
- Errors: an unreachable or failing apiserver raises a retryable error; a request the apiserver rejects as
  invalid, or a PodCliqueSet that does not validate, raises a non-retryable ApplicationError.
- Uncertainty never deletes: every delete follows a successful read in the same attempt.
"""

from __future__ import annotations

import copy
import functools
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, NoReturn, ParamSpec, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from activities import events
from activities.backend import Scheduling
from activities.coalesce import GroupCommit
from activities.fanout import fan_out
from activities.kubeapi import (
    JSON,
    PODCLIQUES,
    PODCLIQUESETS,
    PODGANGS,
    PODS,
    REQUEST_DEADLINE,
    SCALINGGROUPS,
    SERVICES,
    Kube,
    KubeError,
    pod_ready,
    pod_scheduled,
)
from activities.metrics import BREACH_SECONDS, CACHED_READS, GATE_RELEASES, TERMINATIONS
from activities.native_gangs import NativeGangs
from activities.observe import (
    ClusterView,
    SpecReading,
    clique_states,
    controller_uid,
    drift,
    name_of,
    other_controller,
    ours,
    read_pods,
    read_replica,
    read_replica_cached,
    read_spec,
    snapshot,
    terminating,
    uid_of,
)
from activities.pacing import CreationPace, paced
from activities.reachability import LOCAL_WAIT_SECONDS, RETRY_WHEN_BACK, retry_while_down
from activities.scaling import config_annotations, report_clamped, scale_in_order
from activities.status import mirror, mirror_pcs
from activities.watch_cache import NotFresh, WatchCache
from grove import manifests, names, ownership
from grove.evaluate import still_due
from grove.plan import ReplicaPlan
from grove.release import base_lagging, decide_releases
from workflows.contract import (
    DELETE_REPLICA,
    ENSURE_REPLICA,
    ENSURE_REPLICA_CACHED,
    ENSURE_REPLICA_RELEASING,
    MIRROR_STATUS,
    OBSERVE_REPLICA,
    OBSERVE_REPLICA_CACHED,
    RECORD_EVENT,
    RELEASE_GATES,
    TERMINATE_GANG,
)
from workflows.messages import (
    CachedObserveRequest,
    DeleteReplicaResult,
    EnsureRequest,
    EnsureResult,
    EventRequest,
    MirrorRequest,
    MirrorWithRead,
    PcsState,
    ReleaseRequest,
    ReleaseResult,
    ReplicaRef,
    ReplicaSnapshot,
    TerminateRequest,
    TerminateResult,
)
from workflows.presentation import gate_states, mirrors_with_read, observation_of

log = logging.getLogger(__name__)
T = TypeVar("T")
P = ParamSpec("P")

INVALID_SPEC = "InvalidPodCliqueSet"
REJECTED = "RejectedByApiServer"
FORBIDDEN = "Forbidden"
UNREACHABLE = "ApiServerUnreachable"
# An attempt that found kube-apiserver unreachable waits for it until this much of its start-to-close time is left
# (an activity has 60 s; one that used them all would time out), a local activity 2 s at most (reachability.py).
ATTEMPT_MARGIN_SECONDS = 1.5
# terminate_gang and recreate_for_update decide again on a read of their own when the workflow's read is older than
# this (or on a retried attempt): normally the activity starts milliseconds after that read, and a second read would
# only add to how late the deletion comes.
RECHECK_AFTER_SECONDS = 1.0


def _translate(what: str, exc: KubeError) -> NoReturn:
    """Map a Kubernetes failure onto Temporal's retry semantics."""
    if exc.invalid:
        raise ApplicationError(f"{what}: rejected by the apiserver: {exc.message}", type=REJECTED,
                               non_retryable=True) from exc
    if exc.forbidden:
        raise ApplicationError(f"{what}: forbidden: {exc.message}", type=FORBIDDEN, non_retryable=True) from exc
    if exc.unreachable:
        # An outage is expected and retried: one line per attempt says so. BENIGN keeps the SDK from logging each
        # attempt as a WARNING with three chained transport tracebacks (it logs them at DEBUG).
        attempt = activity.info().attempt if activity.in_activity() else 0
        back = _wait_until_answered(exc)
        delay = None if back is None else RETRY_WHEN_BACK if back else \
            retry_while_down(local=activity.info().is_local, attempt=attempt)
        log.warning("%s: kube-apiserver unreachable%s, %s: %s", what, f" (attempt {attempt})" if attempt else "",
                    "retried with backoff" if delay is None else "it answers again, retried now" if back else
                    f"still down, retried in {delay.total_seconds():g} s", exc.message)
        raise ApplicationError(f"{what}: kube-apiserver unreachable: {exc.message}", type=UNREACHABLE,
                               category=ApplicationErrorCategory.BENIGN, next_retry_delay=delay) from None
    raise exc  # conflict or server error: retried with backoff


def _attempt_seconds_left() -> float | None:
    """In an activity: the seconds its attempt has left, less ATTEMPT_MARGIN_SECONDS; None outside one."""
    if not activity.in_activity():
        return None
    info = activity.info()
    if info.start_to_close_timeout is None:
        return None
    spent = (datetime.now(UTC) - info.started_time).total_seconds()
    return info.start_to_close_timeout.total_seconds() - spent - ATTEMPT_MARGIN_SECONDS


def _attempt_deadline() -> float | None:
    """When (time.monotonic) an activity's requests must have ended, so that a request that hangs fails as
    unreachable within the attempt (kubeapi.REQUEST_DEADLINE)."""
    left = _attempt_seconds_left()
    return None if left is None else time.monotonic() + left


def _wait_until_answered(exc: KubeError) -> bool | None:
    """In an activity: wait, within the attempt's own time, until kube-apiserver answers again (activities/
    reachability.py). True when it does, False when the attempt's time ran out first, None outside an activity."""
    left = _attempt_seconds_left()
    if exc.reachability is None or left is None:
        return None
    local = activity.info().is_local
    return exc.reachability.wait(min(left, LOCAL_WAIT_SECONDS) if local else left,
                                 beat=None if local else activity.heartbeat,
                                 given_up=lambda: activity.is_cancelled() or activity.is_worker_shutdown())


def translating_errors(what: str) -> Callable[[Callable[P, T]], Callable[P, T]]:
    """Decorate an activity so Kubernetes failures anywhere in it follow the retry rules above."""

    def decorate(fn: Callable[P, T]) -> Callable[P, T]:
        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
            deadline = REQUEST_DEADLINE.set(_attempt_deadline())
            try:
                return fn(*args, **kwargs)
            except KubeError as exc:
                _translate(what, exc)
            finally:
                REQUEST_DEADLINE.reset(deadline)

        return wrapper

    return decorate


class ReplicaActivities:
    def __init__(self, kube: Kube, scheduling: Scheduling | None = None, cache: WatchCache | None = None, *,
                 count_pcs: bool = True, pace: CreationPace | None = None) -> None:
        self.kube = kube
        # Materialisations running and their limit, shared with the worker's slots (activities/pacing.py).
        self.pace = pace
        self.scheduling = scheduling or Scheduling()  # the gang scheduler backend (activities/backend.py)
        self.cache = cache  # the worker's watch cache; None: every read goes to the apiserver
        # Whether activities recount the PCS's availableReplicas; False where the watcher's leader keeps them.
        self.count_pcs = count_pcs
        self.pcs_recounts: GroupCommit[bool] = GroupCommit()  # replicas of one PCS share its availableReplicas recount

    # --- read --------------------------------------------------------------------------------------------------
    @activity.defn(name=OBSERVE_REPLICA)
    @translating_errors("read replica")
    def observe_replica(self, ref: ReplicaRef) -> ReplicaSnapshot:
        view = read_replica(self.kube, ref)
        return snapshot(view, read_spec(view.pcs, ref, self.scheduling, view.counts()))

    @activity.defn(name=OBSERVE_REPLICA_CACHED)
    @translating_errors("read replica")
    def observe_replica_cached(self, request: CachedObserveRequest) -> ReplicaSnapshot:
        """Routine observation from the watch cache; from the apiserver where the cache cannot serve it (not synced,
        behind the nudges' versions, the PodCliqueSet not there). Only the cached kind is marked `from_cache`."""
        view = self._cached_view(request, "observing")
        if self.cache is not None:
            CACHED_READS.labels("apiserver" if view is None else "cache").inc()
        if view is None:
            found = self.observe_replica(request.ref)
        else:
            found = _as_cached(snapshot(view, read_spec(view.pcs, request.ref, self.scheduling, view.counts())))
        return self._mirror_with_read(request, found)

    def _mirror_with_read(self, request: CachedObserveRequest, found: ReplicaSnapshot) -> ReplicaSnapshot:
        """Where the workflow asks (MIRROR_WITH_READ_PATCH), write the status its round will mirror on this read: one
        local activity per round instead of two. What is written is the workflow's own pure evaluation
        (workflows/presentation.py, `mirrors_with_read`); what the round then computes differently (a rolling update
        turn granted meanwhile) it mirrors itself. A failed write is left to the round's mirror, with its retries."""
        return self._mirror_with(request.ref, request.mirror, found)

    def _mirror_with(self, ref: ReplicaRef, plan: MirrorWithRead | None, found: ReplicaSnapshot) -> ReplicaSnapshot:
        """`found` with the status the workflow's round will mirror on it written, and what was written recorded
        (unchanged where `plan` is None, or the round will not evaluate this very snapshot)."""
        if plan is None:
            return found
        planned = mirrors_with_read(plan, found, ref.replica)
        if planned is None:
            return found
        objects, available_changed, written = planned
        if objects or available_changed:
            try:
                mirror(self.kube, MirrorRequest(ref=ref, objects=objects, pcs_available_changed=available_changed),
                       self.cache, self.pcs_recounts, count_pcs=self.count_pcs)
            except Exception as exc:  # noqa: BLE001 - the round's own mirror_status writes it, with its retries
                log.warning("%s: status not written with the read, left to the round: %s", ref, exc)
                return found
        return found.model_copy(update={"mirrored": written})

    def _cached_view(self, request: CachedObserveRequest, doing: str) -> ClusterView | None:
        """The replica from the watch cache once it has reached `at_least`; None where it cannot serve it."""
        if self.cache is None:
            return None
        try:
            return read_replica_cached(self.cache, request.ref, request.at_least)
        except NotFresh as why:
            log.debug("%s: %s on an apiserver read: %s", request.ref, doing, why)
            return None

    # --- materialise ---------------------------------------------------------------------------------------------
    @activity.defn(name=ENSURE_REPLICA)
    @translating_errors("materialise replica")
    def ensure_replica(self, ref: ReplicaRef) -> EnsureResult:
        """Create what is missing, in DESIGN §4.2 order; update what drifted; delete our surplus."""
        return self._ensure_on(read_replica(self.kube, ref), ref)

    @activity.defn(name=ENSURE_REPLICA_CACHED)
    @translating_errors("materialise replica")
    def ensure_replica_cached(self, request: CachedObserveRequest) -> EnsureResult:
        """ensure_replica on the watch cache's view (once it has reached `at_least`: what the round decided on).
        Creates and updates are idempotent and refused by the apiserver where stale (409), so the cache may drive
        them; a deletion is not taken on it: if any is due, the replica is read from the apiserver and materialised
        again on that read, deletions included (issue 17)."""
        return self._ensure_cached(request)

    def _ensure_cached(self, request: CachedObserveRequest, *, as_read: bool = False) -> EnsureResult:
        ref = request.ref
        view = self._cached_view(request, "materialising")
        if as_read and self.cache is not None:  # the round's read, counted as observe_replica_cached counts its own
            CACHED_READS.labels("apiserver" if view is None else "cache").inc()
        if view is None:
            return self._ensure_on(read_replica(self.kube, ref), ref, as_read=as_read)
        view = copy.deepcopy(view)  # the materialiser marks what it changes on the objects: never on the cache's own
        result = self._ensure_on(view, ref, defer_deletes=True, as_read=as_read)
        if result.deferred:
            log.info("%s: deletions due (%s): reading the apiserver before taking them", ref,
                     _short_list(list(result.deferred)))
            fresh = self._ensure_on(read_replica(self.kube, ref), ref, as_read=as_read)
            return fresh.model_copy(update={"created": result.created + fresh.created,
                                            "updated": result.updated + fresh.updated,
                                            "deferred": result.deferred})
        return result.model_copy(update={"snapshot": _as_cached(result.snapshot)})

    @activity.defn(name=ENSURE_REPLICA_RELEASING)
    @translating_errors("materialise replica")
    def ensure_replica_releasing(self, request: EnsureRequest) -> EnsureResult:
        """ensure_replica (or ensure_replica_cached), then, where the workflow asks, the base gang's gates removed
        from the pods its release decision picks on the resulting snapshot: a new replica's base gang goes to the
        scheduler in the activity that made it, not one workflow task and activity later. Where the workflow asks
        (MIRROR_WITH_ENSURE_PATCH), it also writes the status the round will mirror on the snapshot that results."""
        result = self._ensure_releasing(request)
        return result.model_copy(update={"snapshot": self._mirror_with(request.ref, request.mirror, result.snapshot)})

    def _ensure_releasing(self, request: EnsureRequest) -> EnsureResult:
        as_read = request.first_read
        result = (self._ensure_cached(CachedObserveRequest(ref=request.ref, at_least=request.at_least), as_read=as_read)
                  if request.cached else self._ensure_on(read_replica(self.kube, request.ref), request.ref,
                                                         as_read=as_read))
        found = result.snapshot
        if not request.release_base or found.topology is None or found.pcs_state is not PcsState.PRESENT \
                or found.problems or (as_read and request.ref.replica >= found.wanted_replicas):
            return result
        # As the round's read, the workflow has not seen the spec yet: its scaled-release setting is the read's.
        release_after = found.release_after if as_read else request.release_after
        decision = decide_releases(found.topology, gate_states(found), release_after)  # type: ignore[arg-type]
        if not decision.base:
            return result
        uids = {name: uid for state in found.cliques.values() for name, uid in state.releasable.items()}
        released, _ = self._remove_gates(request.ref, {pod: uids[pod] for pod in decision.base}, "base",
                                         (decision.base_gang,))
        self._record_released(request.ref, [("base", (decision.base_gang,), released)])
        gone = set(released)
        cliques = {name: state.model_copy(update={
            "releasable": {pod: uid for pod, uid in state.releasable.items() if pod not in gone},
            "gated": state.gated - sum(1 for pod in state.releasable if pod in gone)})
            for name, state in found.cliques.items()}
        return result.model_copy(update={"snapshot": found.model_copy(update={"cliques": cliques}),
                                         "released_base": {pod: uids[pod] for pod in released}})

    def _ensure_on(self, view: ClusterView, ref: ReplicaRef, *, defer_deletes: bool = False,
                   as_read: bool = False) -> EnsureResult:
        """`as_read` (EnsureRequest.first_read): where the workflow's round would not materialise on this view (the
        PodCliqueSet gone, its spec held or invalid, this replica not wanted), return the view's snapshot as a read
        would, unchanged, for the round to decide on (hold, scale in, end)."""
        counts = view.counts()
        spec = read_spec(view.pcs, ref, self.scheduling, counts)
        if spec.state is not PcsState.PRESENT:
            return EnsureResult(snapshot=snapshot(view, spec))
        held = spec.problems + other_controller(view)
        if as_read and (spec.plan is None or spec.pcs is None or held or ref.replica >= spec.wanted_replicas):
            return EnsureResult(snapshot=snapshot(view, spec))
        if spec.plan is None or spec.pcs is None or held:
            raise ApplicationError(
                f"PodCliqueSet {ref.namespace}/{ref.pcs} is invalid: " + "; ".join(held),
                type=INVALID_SPEC,
                non_retryable=True,
            )
        changes = _Materialiser(self.kube, view, spec, ref, defer_deletes=defer_deletes)
        with paced(self.pace) as created:
            changes.run()
            created(bool(changes.created))
        report_clamped(self.kube, ref, counts, spec.plan)
        return EnsureResult(
            created=tuple(changes.created),
            deleted=tuple(changes.deleted),
            updated=tuple(changes.updated),
            deferred=tuple(changes.deferred),
            snapshot=snapshot(view, spec),
        )

    # --- gates ---------------------------------------------------------------------------------------------------
    @activity.defn(name=RELEASE_GATES)
    @translating_errors("release gates")
    def release_gates(self, request: ReleaseRequest) -> ReleaseResult:
        """Remove our gate from `pods` (scaled: only if the base gang is still scheduled on a read made now), then
        from `base`. Scaled pods go first: the watcher takes the binding that leaves every released base pod bound
        while a pod is gated for a change the workflow decides on (worker/watcher.py), and the base gang's surplus
        pods, released here with the scaled gangs, bind after every gate of this call is gone."""
        held = self._base_lagging(request)
        message = ""
        released: list[str] = []
        skipped: list[str] = []
        parts: list[tuple[str, tuple[str, ...], list[str]]] = []  # what each part released, for the one Event
        if held:
            message = (f"Kept {names.SCHEDULING_GATE} on {len(request.pods)} pod(s) of scaled PodGang(s) "
                       f"{', '.join(request.gangs) or '-'}: the base gang is not {request.release_after.lower()} on "
                       f"a fresh read ({', '.join(held)}), though the decision's snapshot said so")
            log.info("%s: %s", request.ref, message)
            events.record(self.kube, request.ref, "ScaledReleaseHeld", message)
            skipped = sorted(request.pods)
        elif request.pods:
            released, skipped = self._remove_gates(request.ref, request.pods, request.gang_kind, request.gangs)
            parts.append((request.gang_kind, request.gangs, released))
        if request.base:
            base_gangs = (request.base_gang,) if request.base_gang else ()
            base_released, base_skipped = self._remove_gates(request.ref, request.base, "base", base_gangs)
            parts.append(("base", base_gangs, base_released))
            released, skipped = released + base_released, skipped + base_skipped
        self._record_released(request.ref, parts)
        pods = {**request.pods, **request.base}
        return ReleaseResult(released=tuple(released), skipped=tuple(skipped), held=message,
                             released_uids={pod: pods[pod] for pod in released})

    def _remove_gates(self, ref: ReplicaRef, pods: dict[str, str], gang_kind: str,
                      gangs: tuple[str, ...]) -> tuple[list[str], list[str]]:
        """Our scheduling gate removed from each pod (name -> UID), each on its own; (released, skipped: gone, or
        the name now belongs to another pod). Logged and counted; the caller records the Event."""

        def release(pod: str, uid: str) -> bool:
            patch = {
                # The UID makes the patch fail (422, metadata.uid) if the name now belongs to a different pod.
                "metadata": {"uid": uid},
                "spec": {"schedulingGates": [{"$patch": "delete", "name": names.SCHEDULING_GATE}]},
            }
            try:
                written = self.kube.patch(PODS, ref.namespace, pod, patch,
                                          content_type="application/strategic-merge-patch+json")
                if self.cache is not None:  # the next round's read from the cache sees the gate gone
                    self.cache.wrote(PODS, written)
                return True
            except KubeError as exc:
                if exc.not_found or exc.conflict or exc.replaced:  # gone, or the name now belongs to another pod
                    return False
                raise

        ordered = sorted(pods.items())
        done = fan_out([functools.partial(release, pod, uid) for pod, uid in ordered])
        released = [pod for (pod, _), ok in zip(ordered, done, strict=True) if ok]
        skipped = [pod for (pod, _), ok in zip(ordered, done, strict=True) if not ok]
        if released:
            GATE_RELEASES.labels(gang_kind).inc(len(released))
            log.info("released %d %s pods of %s (%s): %s", len(released), gang_kind, ref, ", ".join(gangs) or "-",
                     " ".join(released))
        return released, skipped

    def _record_released(self, ref: ReplicaRef, parts: list[tuple[str, tuple[str, ...], list[str]]]) -> None:
        """One GatesReleased Event for what one activity released (scaled gangs and the base gang's surplus pods
        alike): one request after the patches, not one per part, and never more Events than releases."""
        said = [f"{len(released)} pod(s) of {kind} PodGang(s) {', '.join(gangs) or '-'}: {_short_list(released)}"
                for kind, gangs, released in parts if released]
        if said:
            events.record(self.kube, ref, "GatesReleased", f"Removed {names.SCHEDULING_GATE} from " + "; ".join(said))

    def _base_lagging(self, request: ReleaseRequest) -> list[str]:
        """The base PodCliques below what a scaled release needs, on a read made now ([] when it may go)."""
        if not request.base_requires:
            return []
        view = read_pods(self.kube, request.ref)
        counted = pod_ready if request.release_after == "Ready" else pod_scheduled
        counts = {}
        for name in request.base_requires:
            pclq = view.pclqs.get(name)
            live = [] if pclq is None or terminating(pclq) else view.live_pods_of(pclq)
            counts[name] = sum(1 for pod in live if counted(pod))
        return base_lagging(request.base_requires, counts)

    # --- termination ---------------------------------------------------------------------------------------------
    @activity.defn(name=TERMINATE_GANG)
    @translating_errors("gang-terminate")
    def terminate_gang(self, request: TerminateRequest) -> TerminateResult:
        """Delete the named PodClique incarnations (pods go with them) and the listed PodGangs."""
        ref = request.ref
        if not pcs_still_ours(self.kube, ref):
            return TerminateResult(already_gone=tuple(request.cliques), at=datetime.now(UTC))
        healed = self._healed_since_decided(request)
        if healed:
            log.warning("gang termination of %s not carried out: %s", ref, healed)
            events.record(self.kube, ref, "TerminationSkipped", f"{request.reason}: not carried out, {healed}")
            return TerminateResult(at=datetime.now(UTC), healed=healed)
        deleted, gone = delete_incarnations(self.kube, ref.namespace, request.cliques)
        selector = names.replica_selector(ref.pcs, ref.replica)
        for gang in self.kube.list_items(PODGANGS, ref.namespace, label_selector=selector):
            if (name_of(gang) in request.pod_gangs and ours(gang) and not terminating(gang)
                    and self.kube.delete(PODGANGS, ref.namespace, name_of(gang), uid=uid_of(gang))):
                deleted.append(name_of(gang))
        at = datetime.now(UTC)
        cause = "operator" if request.forced else "breach"
        TERMINATIONS.labels(request.scope.value, cause).inc()
        if request.breach_start is not None:
            BREACH_SECONDS.labels(request.scope.value).observe((at - request.breach_start).total_seconds())
        log.warning("gang-terminated %s scope=%s deleted=%s reason=%s", ref, request.scope.value, deleted,
                    request.reason)
        details = request.reason
        if request.breach_start is not None and request.delay is not None:
            details += f" (breach since {request.breach_start:%H:%M:%S}Z, delay {request.delay}, " \
                       f"deadline {request.deadline:%H:%M:%S}Z)"
        events.record(self.kube, ref, "GangTerminated", f"{details}; deleted {_short_list(deleted) or 'nothing'}",
                      type="Warning")
        return TerminateResult(deleted=tuple(deleted), already_gone=tuple(gone), at=at)

    def _healed_since_decided(self, request: TerminateRequest) -> str:
        """Why the breach no longer calls for this termination, on a read made now; "" when it still does, or when
        the decision's own read is recent. An attempt retried after kube-apiserver was unreachable (or one that
        started late) would otherwise delete on a read from before the outage, while the kubelets' reports that
        the pods recovered were waiting for kube-apiserver to come back."""
        recheck = request.recheck
        if recheck is None:  # forced by an operator, or asked by a run older than the recheck
            return ""
        stale = stale_decision(recheck.read_at)
        if stale is None:
            return ""
        observed = observation_of(clique_states(read_pods(self.kube, request.ref)), recheck.updating)
        if still_due(recheck.topology, observed, recheck.memory, request.deadline, request.cliques):
            return ""
        counts = [f"{unit.name} {seen.ready}/{unit.min_available} Ready" if (seen := observed.cliques.get(unit.name))
                  else f"{unit.name} gone" for unit in recheck.topology.cliques if unit.name in request.cliques]
        return f"the breach has healed: a read made {stale} shows {_short_list(counts)}"

    # --- scale-in ------------------------------------------------------------------------------------------------
    @activity.defn(name=DELETE_REPLICA)
    @translating_errors("scale in replica")
    def delete_replica(self, ref: ReplicaRef) -> DeleteReplicaResult:
        """Remove every object of a replica index the PCS no longer wants (pods follow their PodCliques)."""
        pcs = self.kube.get(PODCLIQUESETS, ref.namespace, ref.pcs)
        spec = read_spec(pcs, ref, self.scheduling)
        if spec.state is PcsState.PRESENT and spec.wanted_replicas > ref.replica:
            return DeleteReplicaResult(skipped_reason=f"replica {ref.replica} is wanted again "
                                                      f"(spec.replicas={spec.wanted_replicas})")
        if spec.state is PcsState.REPLACED:
            return DeleteReplicaResult(skipped_reason="the PodCliqueSet was replaced; its objects are not ours")
        if spec.state is PcsState.PRESENT and spec.problems:
            # An invalid update changes nothing (DESIGN §4.1): a count read from an invalid spec deletes nothing.
            return DeleteReplicaResult(skipped_reason="the PodCliqueSet spec is invalid: " + "; ".join(spec.problems))
        selector = names.replica_selector(ref.pcs, ref.replica)
        groups = ownership.scaling_groups_of(
            ref.pcs_uid, self.kube.list_items(SCALINGGROUPS, ref.namespace, label_selector=selector))
        deleted: list[str] = []
        for resource in (PODCLIQUES, SCALINGGROUPS, PODGANGS, SERVICES):
            for obj in self.kube.list_items(resource, ref.namespace, label_selector=selector):
                if (ours(obj) and not terminating(obj) and ownership.within_replica(obj, ref.pcs_uid, groups)
                        and self.kube.delete(resource, ref.namespace, name_of(obj), uid=uid_of(obj))):
                    deleted.append(f"{resource.kind}/{name_of(obj)}")
        if deleted:
            events.record(self.kube, ref, "ReplicaScaledIn",
                          f"Replica {ref.replica} is no longer wanted; deleted {_short_list(deleted)}")
        if self.count_pcs:  # the PCS's figures no longer count this index (nothing else would rewrite them now)
            mirror_pcs(self.kube, ref.namespace, ref.pcs, ref.pcs_uid)
        return DeleteReplicaResult(deleted=tuple(deleted))

    # --- status mirror and events ----------------------------------------------------------------------------------
    @activity.defn(name=MIRROR_STATUS)
    @translating_errors("mirror status")
    def mirror_status(self, request: MirrorRequest) -> list[str]:
        return mirror(self.kube, request, self.cache, self.pcs_recounts, count_pcs=self.count_pcs)

    @activity.defn(name=RECORD_EVENT)
    def record_event(self, request: EventRequest) -> None:
        events.record(self.kube, request.ref, request.reason, request.message, type=request.type)


def _as_cached(found: ReplicaSnapshot) -> ReplicaSnapshot:
    """Marked as read from the cache, and without read_from: a nudge judged by the clock is never covered by the
    cache (the workflow reads the apiserver for those), only by versions."""
    return found.model_copy(update={"from_cache": True, "read_from": None})


def drift_in_cache(cache: WatchCache, scheduling: Scheduling | None, ref: ReplicaRef) -> tuple[str, ...] | None:
    """What materialising the replica would fix, on the watch cache's view as it is now: the watcher's test of a
    replica found by its first list (worker/watcher.py). None where the cache cannot say: not synced, the
    PodCliqueSet not there as this replica's, a spec that plans nothing (invalid, held, being deleted), or a replica
    no longer wanted (a scale-in is decided on a fresh read)."""
    try:
        view = read_replica_cached(cache, ref)
    except NotFresh:
        return None
    spec = read_spec(view.pcs, ref, scheduling, view.counts())
    if (spec.state is not PcsState.PRESENT or spec.plan is None or spec.problems
            or ref.replica >= spec.wanted_replicas):
        return None
    return tuple(drift(view, spec.plan))


def stale_decision(read_at: datetime) -> str | None:
    """When the read a deletion was decided on calls for another: this attempt is a retry, or starts over
    RECHECK_AFTER_SECONDS after that read (activity clocks). Says which, for the reason given; None otherwise."""
    attempt = activity.info().attempt if activity.in_activity() else 1
    age = (datetime.now(UTC) - read_at).total_seconds()
    if attempt == 1 and age < RECHECK_AFTER_SECONDS:
        return None
    return f"{age:.1f} s after the decision's (attempt {attempt})"


def pcs_still_ours(kube: Kube, ref: ReplicaRef) -> bool:
    """The PCS the request was made for still exists (same UID): nothing is deleted for a replaced or gone one."""
    pcs = kube.get(PODCLIQUESETS, ref.namespace, ref.pcs)
    return pcs is not None and uid_of(pcs) == ref.pcs_uid


def delete_incarnations(kube: Kube, namespace: str, cliques: dict[str, str]) -> tuple[list[str], list[str]]:
    """Delete these PodClique incarnations (name -> UID): (deleted, already gone or replaced)."""
    deleted: list[str] = []
    gone: list[str] = []
    for name, uid in sorted(cliques.items()):
        # Foreground: the PodClique disappears only after its pods, so the recreated one never meets them.
        if kube.delete(PODCLIQUES, namespace, name, uid=uid, propagation="Foreground"):
            deleted.append(name)
        else:
            gone.append(name)
    return deleted, gone


def _short_list(items: list[str], limit: int = 12) -> str:
    if len(items) <= limit:
        return ", ".join(items)
    return ", ".join(items[:limit]) + f" and {len(items) - limit} more"


class _Materialiser:
    """Converges one replica's objects towards its plan, recording what it changed."""

    def __init__(self, kube: Kube, view: ClusterView, spec: SpecReading, ref: ReplicaRef, *,
                 defer_deletes: bool = False) -> None:
        assert spec.plan is not None and spec.pcs is not None and view.pcs is not None
        self.kube = kube
        self.view = view
        self.pcs_model = spec.pcs
        self.plan: ReplicaPlan = spec.plan
        self.ref = ref
        self.namespace = ref.namespace
        self.pcs_owner = manifests.owner_reference(
            names.GROVE_API_VERSION, names.KIND_PODCLIQUESET, ref.pcs, ref.pcs_uid
        )
        self.created: list[str] = []
        self.deleted: list[str] = []
        self.updated: list[str] = []
        # On a cached view nothing is deleted: what would be is listed here, and deleted on a fresh read instead.
        self.defer_deletes = defer_deletes
        self.deferred: list[str] = []
        self.native = NativeGangs(kube, self.plan, spec.backend, names.replica_selector(ref.pcs, ref.replica))

    def run(self) -> None:
        self.ensure_service()
        self.ensure_scaling_groups()
        self.ensure_pod_cliques()
        new_gangs = self.ensure_pod_gangs()  # before pods: a pod must never exist without its gang (DESIGN §3)
        self.created += self.native.ensure(self.view.gangs, new_gangs)  # kube backend: each gang's PodGroup, first
        self.ensure_pods()
        self.update_references()
        self.delete_surplus_gangs()

    def _delete(self, resource: Any, name: str, obj: JSON, propagation: str = "Background") -> bool:
        """Delete our object by UID; on a cached view, only note that it is due (ensure_replica_cached)."""
        if self.defer_deletes:
            self.deferred.append(f"{resource.kind}/{name}")
            return False
        return bool(self.kube.delete(resource, self.namespace, name, uid=uid_of(obj), propagation=propagation))

    def _create(self, resource: Any, body: JSON) -> JSON | None:
        obj = self._create_quietly(resource, body)
        if obj is not None:
            self.created.append(f"{body['kind']}/{body['metadata']['name']}")
        return obj

    def _create_quietly(self, resource: Any, body: JSON) -> JSON | None:
        """Create `body`; None when it already exists (a retry after a lost response, or an old incarnation
        still going). Records nothing: safe to call from several threads."""
        try:
            return self.kube.create(resource, self.namespace, body)
        except KubeError as exc:
            if exc.conflict:
                return None
            raise

    def ensure_service(self) -> None:
        # Create, and take a conflict as "there": one request either way, where a GET first made two on a
        # replica's first pass (issue 17).
        self._create(SERVICES, manifests.service_manifest(self.plan, owner=self.pcs_owner))

    def ensure_scaling_groups(self) -> None:
        existing = self.view.pcsgs or {}
        planned = {g.name for g in self.plan.scaling_groups}
        for group in self.plan.scaling_groups:
            body = manifests.scaling_group_manifest(self.plan, group.name, owner=self.pcs_owner,
                                                    annotations=config_annotations(self.pcs_model, group.config_name))
            current = existing.get(group.name)
            if current is None:
                created = self._create(SCALINGGROUPS, body)
                if created is not None:
                    existing[group.name] = created
            elif not terminating(current) and _spec_differs(current, body):
                # resourceVersion: a scale write that landed since our read makes this a conflict (the activity is
                # retried on a fresh read), never a lost update of the count the PCSG owns (grove.scale).
                existing[group.name] = self.kube.patch(SCALINGGROUPS, self.namespace, group.name,
                                                       {"metadata": _version_of(current), "spec": body["spec"]})
                self.updated.append(f"PodCliqueScalingGroup/{group.name}")
        for name, obj in existing.items():
            if (name not in planned and ours(obj) and not terminating(obj)
                    and controller_uid(obj) == self.ref.pcs_uid
                    and self._delete(SCALINGGROUPS, name, obj)):
                self.deleted.append(f"PodCliqueScalingGroup/{name}")
        self.view.pcsgs = existing

    def _pclq_owner(self, pclq_name: str) -> JSON | None:
        pclq = self.plan.pod_clique(pclq_name)
        if pclq.scaling_group is None:
            return self.pcs_owner
        group = (self.view.pcsgs or {}).get(pclq.scaling_group.name)
        if group is None or terminating(group):
            return None  # its scaling group is not there (yet): the PodClique waits for it
        return manifests.owner_reference(
            names.GROVE_API_VERSION, names.KIND_PODCLIQUESCALINGGROUP, name_of(group), uid_of(group)
        )

    def ensure_pod_cliques(self) -> None:
        planned = {p.name for p in self.plan.pod_cliques}
        for pclq in self.plan.pod_cliques:
            current = self.view.pclqs.get(pclq.name)
            if current is None:
                owner = self._pclq_owner(pclq.name)
                if owner is None:
                    continue
                body = manifests.podclique_manifest(self.pcs_model, self.plan, pclq.name, owner=owner)
                created = self._create(PODCLIQUES, body)
                if created is not None:
                    self.view.pclqs[pclq.name] = created
            elif not terminating(current):
                spec = current.get("spec") or {}
                if spec.get("replicas") != pclq.replicas or spec.get("minAvailable") != pclq.min_available:
                    self.view.pclqs[pclq.name] = self.kube.patch(
                        PODCLIQUES, self.namespace, pclq.name,
                        {"metadata": _version_of(current),
                         "spec": {"replicas": pclq.replicas, "minAvailable": pclq.min_available}},
                    )
                    self.updated.append(f"PodClique/{pclq.name}")
        groups = ownership.scaling_groups_of(self.ref.pcs_uid, (self.view.pcsgs or {}).values())
        # Highest scaling-group replica indices first, so an interrupted scale-in never leaves a gap.
        for name, obj in scale_in_order(self.view.pclqs):
            if (name not in planned and ours(obj) and not terminating(obj) and ownership.within_replica(obj, self.ref.pcs_uid, groups)
                    and self._delete(PODCLIQUES, name, obj, propagation="Foreground")):
                self.deleted.append(f"PodClique/{name}")
                obj.setdefault("metadata", {})["deletionTimestamp"] = "pending"

    def _references(self) -> dict[str, list[str]]:
        refs: dict[str, list[str]] = {}
        for name, pclq in self.view.pclqs.items():
            if not terminating(pclq):
                refs[name] = sorted(name_of(p) for p in self.view.live_pods_of(pclq))
        return refs

    def ensure_pod_gangs(self) -> set[str]:
        """Create the missing PodGangs; returns the names of those this pass created."""
        refs = self._references()
        new: set[str] = set()
        for gang in self.plan.pod_gangs:
            if gang.name not in self.view.gangs:
                body = manifests.podgang_manifest(self.plan, gang.name, refs, owner=self.pcs_owner)
                created = self._create(PODGANGS, body)
                if created is not None:
                    self.view.gangs[gang.name] = created
                    new.add(gang.name)
        return new

    def ensure_pods(self) -> None:
        missing: list[JSON] = []
        surplus: list[tuple[str, JSON]] = []
        for pclq in self.plan.pod_cliques:
            obj = self.view.pclqs.get(pclq.name)
            if obj is None or terminating(obj):
                continue
            if pclq.pod_gang not in self.view.gangs:
                continue  # never a pod without its gang
            owner = manifests.owner_reference(names.GROVE_API_VERSION, names.KIND_PODCLIQUE, pclq.name, uid_of(obj))
            live = {name_of(p): p for p in self.view.live_pods_of(obj)}
            for index, pod_name in enumerate(pclq.pod_names):
                if pod_name in live or pod_name in self.view.pods:
                    continue  # present, or an older incarnation's pod still terminating: wait for it
                body = self.native.place(manifests.pod_manifest(self.pcs_model, self.plan, pclq.name, index,
                                                                owner=owner), pclq, index)
                if body is not None:  # None: its gang's native PodGroup is not there yet
                    missing.append(body)
            wanted = set(pclq.pod_names)
            # Scale-in removes the highest pod indices first.
            surplus += [(p, live[p]) for p in sorted((p for p in live if p not in wanted), key=_pod_index,
                                                     reverse=True)]
        # Pods do not depend on each other (their gangs exist by now): created concurrently, recorded in plan order.
        created = fan_out([functools.partial(self._create_quietly, PODS, body) for body in missing], bulk=True)
        for body, obj in zip(missing, created, strict=True):
            if obj is not None:
                self.created.append(f"Pod/{body['metadata']['name']}")
                self.view.pods[body["metadata"]["name"]] = obj
        for pod_name, pod in surplus:
            if self._delete(PODS, pod_name, pod):
                self.deleted.append(f"Pod/{pod_name}")
                pod["metadata"]["deletionTimestamp"] = "pending"

    def update_references(self) -> None:
        refs = self._references()
        for gang in self.plan.pod_gangs:
            current = self.view.gangs.get(gang.name)
            if current is None or terminating(current):
                continue
            body = manifests.podgang_manifest(self.plan, gang.name, refs, owner=self.pcs_owner)
            if (current.get("spec") or {}).get("podgroups") != body["spec"]["podgroups"]:
                self.view.gangs[gang.name] = self.kube.patch(
                    PODGANGS, self.namespace, gang.name, {"spec": {"podgroups": body["spec"]["podgroups"]}}
                )
                self.updated.append(f"PodGang/{gang.name}")

    def delete_surplus_gangs(self) -> None:
        planned = {g.name for g in self.plan.pod_gangs}
        for name, obj in list(self.view.gangs.items()):
            if (name not in planned and ours(obj) and not terminating(obj)
                    and controller_uid(obj) == self.ref.pcs_uid
                    and self._delete(PODGANGS, name, obj)):
                self.deleted.append(f"PodGang/{name}")
                obj.setdefault("metadata", {})["deletionTimestamp"] = "pending"


def _version_of(obj: JSON) -> JSON:
    """A patch precondition: the object must still be the version we read (409 Conflict otherwise)."""
    version = obj.get("metadata", {}).get("resourceVersion")
    return {"resourceVersion": version} if version else {}


def _spec_differs(current: JSON, desired: JSON) -> bool:
    have = current.get("spec") or {}
    return any(have.get(k) != v for k, v in desired["spec"].items())


def _pod_index(pod_name: str) -> int:
    tail = pod_name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else -1
