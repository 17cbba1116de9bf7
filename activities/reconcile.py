"""Activities of the batch reconciler: list PodCliqueSets, judge their spec, and make sure each wanted replica
has its workflow (Temporal client calls live here too, as DESIGN §6 asks: workflows never call clients)."""

from __future__ import annotations

import asyncio
import functools
import logging
from datetime import UTC, datetime, timedelta

from temporalio import activity
from temporalio.client import Client
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.service import RPCError, RPCStatusCode

from activities import events
from activities.fanout import fan_out, gather_all
from activities.kubeapi import JSON, PODCLIQUES, PODCLIQUESETS, Kube, condition_of
from activities.observe import parsed_pcs
from activities.scaling import sync_day2
from activities.status import write_observed_generation, write_pcs_condition
from grove import names
from grove.controllers import other_controller_problem
from grove.models.podcliqueset import PodCliqueSet, wanted_replicas
from grove.rollout import generation_hash
from workflows.contract import (
    GROVE_NAMESPACE,
    GROVE_PAUSED,
    GROVE_PCS,
    GROVE_PHASE,
    GROVE_REPLICA,
    NUDGE_SIGNAL,
    PCS_CHANGED_SIGNAL,
    REPLICA_WORKFLOW,
    ROLLOUT_WORKFLOW,
    SWEEP_REPLICA_WORKFLOWS,
    SYNC_PCS_BATCH,
    parse_replica_workflow_id,
    replica_query,
    rollout_workflow_id,
)
from workflows.messages import (
    Nudge,
    OrphanSweepRequest,
    PcsBatchRequest,
    PcsBatchResult,
    ReplicaInput,
    ReplicaRef,
)
from workflows.patches import NEWEST_INPUT_BASELINE
from workflows.rollout_messages import PcsRef, RolloutInput

log = logging.getLogger(__name__)

START_CONCURRENCY = 32
# PodCliqueSets of one batch judged at once (spec checks, SpecValid and UnsupportedFields conditions, HPAs).
JUDGE_CONCURRENCY = 8


def checked_spec(obj: JSON) -> tuple[PodCliqueSet | None, list[str]]:
    """(the PCS's spec parsed, None where it does not parse; every problem with it, the remembered-field rules'
    included): one parse for everything a full pass decides about a PCS."""
    pcs, problems = parsed_pcs(obj)
    return pcs, [str(p) for p in problems]


def rollout_settled(obj: JSON, pcs: PodCliqueSet | None) -> bool:
    """The PCS's status shows its rollout done with the spec as it stands (`pcs`, parsed from `obj`; None: it does
    not parse): the spec's generation hash mirrored, every wanted replica updated, no update in progress. A full pass
    leaves such a rollout workflow asleep; any other (a change the watcher missed, OnDelete pods still outdated, a
    status never written) is woken as on a change."""
    if pcs is None:
        return False
    status = obj.get("status") or {}
    return (status.get("currentGenerationHash") == generation_hash(pcs)
            and status.get("updatedReplicas") == wanted_replicas(obj)
            and condition_of(obj, names.CONDITION_UPDATE_IN_PROGRESS).get("status") == "False")


class ReconcileActivities:
    def __init__(self, kube: Kube, client: Client, *, replica_task_timeout: timedelta | None = None) -> None:
        self.kube = kube
        self.client = client
        self.replica_task_timeout = replica_task_timeout  # None: Temporal's default (10 s)

    @activity.defn(name=SYNC_PCS_BATCH)
    async def sync_pcs_batch(self, request: PcsBatchRequest) -> PcsBatchResult:
        items, token = await asyncio.to_thread(self._read, request)
        started: list[str] = []
        invalid: list[str] = []
        starting = asyncio.Semaphore(START_CONCURRENCY)
        judging = asyncio.Semaphore(JUDGE_CONCURRENCY)
        elsewhere = await asyncio.to_thread(self._grove_operator_objects, request.namespace) if items else {}

        async def ensure(ref: ReplicaRef) -> None:
            async with starting:
                await self._ensure_workflow(ref, request)
                started.append(ref.workflow_id)

        async def sync_one(obj: JSON) -> None:
            """Judge one PCS, then start its workflows at once: a batch of 100 new PodCliqueSets judged one after
            the other (three or four requests each) started its first replica workflow only after all of them,
            10-25 s after they were created on a loaded apiserver (B3 at 1,000 replicas)."""
            meta = obj["metadata"]
            async with judging:
                pcs, problems = checked_spec(obj)
                other = other_controller_problem(meta.get("finalizers") or [],
                                                 elsewhere.get((meta["namespace"], meta["name"]), []))
                if other:
                    problems.append(other)
                if problems:
                    invalid.append(f"{meta['namespace']}/{meta['name']}")
                await asyncio.to_thread(self._mirror_validity, obj, problems)
                if not problems:  # DESIGN §4.10: unsupported fields reported, HPAs kept in step with the spec
                    await asyncio.to_thread(sync_day2, self.kube, obj, request.only is not None)
            # A full pass every 10 minutes used to wake every rollout workflow for a read of its whole PCS (four
            # requests): most of a settled fleet's apiserver traffic. It wakes only those not settled now.
            wake = request.only is not None or not rollout_settled(obj, pcs)
            jobs = [self._ensure_rollout(PcsRef(namespace=meta["namespace"], pcs=meta["name"], pcs_uid=meta["uid"]),
                                         request, wake)]
            # An unreadable count starts nothing; running workflows hold (they see the spec invalid).
            for index in range(wanted_replicas(obj) or 0):
                ref = ReplicaRef(namespace=meta["namespace"], pcs=meta["name"], pcs_uid=meta["uid"], replica=index)
                jobs.append(ensure(ref))
            await gather_all(jobs)
            # Only once this generation is judged and every workflow it wants runs: a worker's first list then leaves
            # the PCS alone (worker/watcher.py), where it used to start 1,000 workflows anew after every restart.
            await asyncio.to_thread(write_observed_generation, self.kube, obj)

        await gather_all(sync_one(obj) for obj in items if not obj["metadata"].get("deletionTimestamp"))
        if request.only is not None:
            # Changed PodCliqueSets: wake their surplus workflows now, not at the next full pass. Counting from the
            # watch event's old and new spec is not enough: a scale-in held while the spec was invalid is due when
            # a later change makes it valid, and neither version of that change names the surplus index.
            found = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in items}
            querying = asyncio.Semaphore(JUDGE_CONCURRENCY)

            async def nudge_surplus(namespace: str, name: str) -> None:
                current = found.get((namespace, name))
                wanted = (None, 0) if current is None or current["metadata"].get("deletionTimestamp") else (
                    current["metadata"]["uid"], wanted_replicas(current))
                async with querying:
                    await self._nudge_surplus(replica_query(namespace=namespace, pcs=name), {(namespace, name): wanted})

            await gather_all(nudge_surplus(namespace, name) for namespace, name in request.only)
        return PcsBatchResult(
            continue_token=token,
            seen=tuple((o["metadata"]["namespace"], o["metadata"]["name"]) for o in items),
            started=tuple(sorted(started)),
            invalid=tuple(invalid),
        )

    def _grove_operator_objects(self, namespace: str | None) -> dict[tuple[str, str], list[tuple[str, str]]]:
        """PodCliques the Grove operator manages, by PodCliqueSet (one list per batch; grove/controllers.py)."""
        found: dict[tuple[str, str], list[tuple[str, str]]] = {}
        for obj in self.kube.list_items(PODCLIQUES, namespace, label_selector=names.grove_operator_selector()):
            meta = obj["metadata"]
            pcs = (meta.get("labels") or {}).get(names.LABEL_PART_OF)
            if pcs:
                found.setdefault((meta["namespace"], pcs), []).append((PODCLIQUES.kind, meta["name"]))
        return found

    def _read(self, request: PcsBatchRequest) -> tuple[list[JSON], str | None]:
        if request.only is not None:
            found = fan_out([functools.partial(self.kube.get, PODCLIQUESETS, ns, name) for ns, name in request.only])
            return [obj for obj in found if obj is not None], None
        listing = self.kube.list(PODCLIQUESETS, request.namespace, limit=request.batch_size,
                                 continue_token=request.continue_token)
        return list(listing.get("items") or []), listing.get("metadata", {}).get("continue") or None

    async def _ensure_workflow(self, ref: ReplicaRef, request: PcsBatchRequest) -> None:
        await self.client.start_workflow(
            REPLICA_WORKFLOW,
            ReplicaInput(ref=ref, safety_resync=request.replica_safety_resync, baseline=NEWEST_INPUT_BASELINE),
            id=ref.workflow_id,
            task_queue=request.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            task_timeout=self.replica_task_timeout,
            search_attributes=TypedSearchAttributes([
                SearchAttributePair(GROVE_NAMESPACE, ref.namespace),
                SearchAttributePair(GROVE_PCS, ref.pcs),
                SearchAttributePair(GROVE_REPLICA, ref.replica),
                SearchAttributePair(GROVE_PHASE, "Pending"),
                SearchAttributePair(GROVE_PAUSED, False),
            ]),
            static_summary=f"PodCliqueSet {ref.namespace}/{ref.pcs} · replica {ref.replica}",
            static_details=(
                f"Drives replica {ref.replica} of PodCliqueSet `{ref.namespace}/{ref.pcs}` (uid `{ref.pcs_uid}`): "
                "materialise, release gates, watch availability, gang-terminate after terminationDelay. "
                "Signals/updates: `pause`, `resume`, `force_terminate`; query: `status`."
            ),
        )

    async def _ensure_rollout(self, ref: PcsRef, request: PcsBatchRequest, wake: bool) -> None:
        """The PCS's rollout workflow (DESIGN §4.9), started if absent; `wake`: told the PCS changed (signal-with-
        start). A new workflow reads the PCS at once either way."""
        await self.client.start_workflow(
            ROLLOUT_WORKFLOW,
            RolloutInput(ref=ref, idle_resync=request.rollout_idle_resync),
            id=rollout_workflow_id(ref.namespace, ref.pcs, ref.pcs_uid),
            task_queue=request.task_queue,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            start_signal=PCS_CHANGED_SIGNAL if wake else None,
            id_conflict_policy=(WorkflowIDConflictPolicy.UNSPECIFIED if wake
                                else WorkflowIDConflictPolicy.USE_EXISTING),
            search_attributes=TypedSearchAttributes([
                SearchAttributePair(GROVE_NAMESPACE, ref.namespace),
                SearchAttributePair(GROVE_PCS, ref.pcs),
            ]),
            static_summary=f"PodCliqueSet {ref.namespace}/{ref.pcs} · rolling updates",
            static_details=(
                f"Coordinates rolling updates of PodCliqueSet `{ref.namespace}/{ref.pcs}` (uid `{ref.pcs_uid}`): one "
                "replica at a time. Signals/updates: `pause`, `resume`; query: `status`."
            ),
        )

    def _mirror_validity(self, obj: JSON, problems: list[str]) -> None:
        """SpecValid condition on the PCS, and an Event when it turns False (DESIGN §4.1)."""
        meta = obj["metadata"]
        status = obj.get("status") or {}
        current: JSON = next((c for c in status.get("conditions") or [] if c.get("type") == names.CONDITION_SPEC_VALID), {})
        want_status = "False" if problems else "True"
        message = "; ".join(problems)[:1000] if problems else "the spec passed validation"
        if current.get("status") == want_status and current.get("message") == message:
            return
        write_pcs_condition(self.kube, obj, names.CONDITION_SPEC_VALID, want_status,
                            names.REASON_INVALID if problems else names.REASON_VALID, message)
        if problems:
            log.warning("PodCliqueSet %s/%s is invalid: %s", meta["namespace"], meta["name"], message)
            events.record_for_pcs(self.kube, meta["namespace"], meta["name"], meta["uid"], "InvalidSpec",
                                  f"Rejected: {message}. Nothing was created, changed or deleted.", type="Warning")

    @activity.defn(name=SWEEP_REPLICA_WORKFLOWS)
    async def sweep_replica_workflows(self, request: OrphanSweepRequest) -> int:
        """Nudge running replica workflows whose PCS is gone, replaced or no longer wants their index."""
        listing = await asyncio.to_thread(self.kube.list, PODCLIQUESETS, request.namespace)
        wanted = {
            (o["metadata"]["namespace"], o["metadata"]["name"]): (o["metadata"]["uid"], wanted_replicas(o))
            for o in listing.get("items") or []
            if not o["metadata"].get("deletionTimestamp")
        }
        return await self._nudge_surplus(replica_query(namespace=request.namespace), wanted)

    async def _nudge_surplus(self, query: str, wanted: dict[tuple[str, str], tuple[str | None, int | None]]) -> int:
        """Nudge the running replica workflows matched by `query` whose PCS (namespace, name) -> (uid, replicas) is
        gone, replaced or no longer wants their index. An unreadable count (None) makes no index surplus."""
        nudged = 0
        async for execution in self.client.list_workflows(query):
            key = parse_replica_workflow_id(execution.id)
            if key is None:
                continue
            uid, replicas = wanted.get((key.namespace, key.pcs), (None, 0))
            if uid == key.pcs_uid and (replicas is None or key.replica < replicas):
                continue
            try:
                await self.client.get_workflow_handle(execution.id).signal(NUDGE_SIGNAL, Nudge(sent_at=datetime.now(UTC)))
                nudged += 1
            except RPCError as exc:
                if exc.status != RPCStatusCode.NOT_FOUND:
                    raise
        return nudged
