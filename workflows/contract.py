"""The Temporal contract: every name a workflow, worker, CLI or test uses to talk to Temporal, in one place.

Workflow types and ids, the task queue default, activity names, signal/update/query names, search attributes and
the visibility queries built from them. A rename here is a breaking change for running workflows and for recorded
histories (tests/workflows/test_replay.py): add names, do not change them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from temporalio.common import SearchAttributeKey

# --- workflow types, ids, task queue ------------------------------------------------------------------------------
REPLICA_WORKFLOW = "ReplicaWorkflow"
RECONCILER_WORKFLOW = "ReconcilerWorkflow"
ROLLOUT_WORKFLOW = "RolloutWorkflow"  # one per PodCliqueSet (UID): coordinates its rolling updates
ROLLOUT_WORKFLOW_PREFIX = "rollout"
REPLICA_WORKFLOW_PREFIX = "pcs"
DEFAULT_TASK_QUEUE = "grove-temporal"
RECONCILER_WORKFLOW_ID = "grove-temporal/reconciler"


@dataclass(frozen=True)
class ReplicaKey:
    namespace: str
    pcs: str
    pcs_uid: str
    replica: int

    @property
    def workflow_id(self) -> str:
        return replica_workflow_id(self.namespace, self.pcs, self.pcs_uid, self.replica)


def replica_workflow_id(namespace: str, pcs: str, pcs_uid: str, replica: int) -> str:
    """A replica workflow id names the PCS by namespace, name and UID, so that a PCS deleted and recreated under the
    same name (new UID) gets fresh workflows instead of inheriting the old replica's memory."""
    return f"{REPLICA_WORKFLOW_PREFIX}/{namespace}/{pcs}/{pcs_uid}/{replica}"


def parse_replica_workflow_id(workflow_id: str) -> ReplicaKey | None:
    """The inverse of replica_workflow_id; None for ids that are not replica workflows."""
    parts = workflow_id.split("/")
    if len(parts) != 5 or parts[0] != REPLICA_WORKFLOW_PREFIX or not parts[4].isdigit():
        return None
    return ReplicaKey(namespace=parts[1], pcs=parts[2], pcs_uid=parts[3], replica=int(parts[4]))


def reconciler_workflow_id(namespace: str | None) -> str:
    """One reconciler per watched scope: all namespaces, or one namespace."""
    return RECONCILER_WORKFLOW_ID if not namespace else f"{RECONCILER_WORKFLOW_ID}/{namespace}"


def rollout_workflow_id(namespace: str, pcs: str, pcs_uid: str) -> str:
    return f"{ROLLOUT_WORKFLOW_PREFIX}/{namespace}/{pcs}/{pcs_uid}"


# --- activities ----------------------------------------------------------------------------------------------------
OBSERVE_REPLICA = "observe_replica"
OBSERVE_REPLICA_CACHED = "observe_replica_cached"  # from the worker's watch cache (activities/watch_cache.py)
ENSURE_REPLICA = "ensure_replica"
ENSURE_REPLICA_CACHED = "ensure_replica_cached"  # on the watch cache; deletions only on a fresh read
# Either of the two, and then the base gang's gates released in the same activity where the workflow asks for it
# (ENSURE_RELEASES_BASE_PATCH in workflows/replica.py)
ENSURE_REPLICA_RELEASING = "ensure_replica_releasing"
RELEASE_GATES = "release_gates"
MIRROR_STATUS = "mirror_status"
RECORD_EVENT = "record_event"
TERMINATE_GANG = "terminate_gang"
DELETE_REPLICA = "delete_replica"
SYNC_PCS_BATCH = "sync_pcs_batch"
SWEEP_REPLICA_WORKFLOWS = "sweep_replica_workflows"
RELEASE_STARTUP = "release_startup"  # startup order: mark waiting pods Released (DESIGN §4.10)
OBSERVE_ROLLOUT = "observe_rollout"
OBSERVE_ROLLOUT_CACHED = "observe_rollout_cached"  # an idle rollout's periodic read, from the watch cache
RECREATE_FOR_UPDATE = "recreate_for_update"
MIRROR_ROLLOUT_STATUS = "mirror_rollout_status"
RECORD_ROLLOUT_EVENT = "record_rollout_event"
# Activities scheduled with a heartbeat timeout are kept alive by the worker (worker/heartbeats.py): one lost with its
# worker, or whose completion a partition from Temporal dropped, is retried after this rather than after its
# start_to_close timeout. A patch in each workflow, decided once per run at its start.
ACTIVITY_HEARTBEATS_PATCH = "activity-heartbeats"
ACTIVITY_HEARTBEAT_TIMEOUT = timedelta(seconds=20)
# Run as local activities (issue 17): the replica's routine, short, non-destructive steps. A local activity runs in
# the workflow task that asks for it and leaves one marker in the history, where an activity leaves three events and
# a workflow task of three more; a routine round shrinks from about 16 events to about 6, and the Temporal server
# does that much less work. Fresh reads (the evidence for a destructive decision) and every deletion decided by the
# workflow (terminate_gang, recreate_for_update, delete_replica) stay activities, visible as such in the UI; gate
# releases and materialising followed later (LOCAL_RELEASES, LOCAL_ENSURES). A patch, decided once per run at its start.
LOCAL_ACTIVITIES_PATCH = "local-activities"
LOCAL_ACTIVITIES = frozenset({OBSERVE_REPLICA_CACHED, MIRROR_STATUS, RECORD_EVENT})
# Gate and startup releases as local activities too (workflows/replica.py, LOCAL_RELEASES_PATCH).
LOCAL_RELEASES = frozenset({RELEASE_GATES, RELEASE_STARTUP})
# Materialising too (workflows/replica.py, LOCAL_ENSURE_PATCH): every deletion it makes is still decided on a fresh
# read inside the activity, whichever way it is scheduled.
LOCAL_ENSURES = frozenset({ENSURE_REPLICA, ENSURE_REPLICA_CACHED, ENSURE_REPLICA_RELEASING})

# --- signals, updates, queries -------------------------------------------------------------------------------------
NUDGE_SIGNAL = "nudge"  # something the replica cares about changed in Kubernetes (watcher, reconciler)
# A header of the nudge signal: the resourceVersion, per kind, of the watch events it stands for (a header, not a
# payload field: a worker that predates it ignores a header, where it would drop a payload it cannot decode).
NUDGE_VERSIONS_HEADER = "grove-temporal-nudge-versions"
# Another: PodClique name -> UID of each of the replica's PodCliques the watcher saw reach its minAvailable (the
# was-available bit: a nudge held back for the status window must not lose a crossing that a Ready lost undid).
NUDGE_REACHED_HEADER = "grove-temporal-nudge-reached"
PCS_CHANGED_SIGNAL = "pcs_changed"  # a PodCliqueSet changed (watcher -> reconciler)
PAUSE = "pause"  # signal and update
RESUME = "resume"  # signal and update
FORCE_TERMINATE = "force_terminate"  # signal and update
STATUS_QUERY = "status"
ROLLOUT_TURN_SIGNAL = "rollout_turn"  # rollout workflow -> replica workflow: a turn granted, changed or revoked
ROLLOUT_REPORT_SIGNAL = "rollout_report"  # replica workflow -> rollout workflow: how its turn ended

# --- search attributes ---------------------------------------------------------------------------------------------
GROVE_NAMESPACE = SearchAttributeKey.for_keyword("GroveNamespace")
GROVE_PCS = SearchAttributeKey.for_keyword("GrovePodCliqueSet")
GROVE_REPLICA = SearchAttributeKey.for_int("GroveReplica")
GROVE_PHASE = SearchAttributeKey.for_keyword("GrovePhase")
GROVE_PAUSED = SearchAttributeKey.for_bool("GrovePaused")

# --- memo ----------------------------------------------------------------------------------------------------------
# A replica's pending terminationDelay deadlines (messages.DeadlineMemo). A memo rather than a search attribute: a
# memo needs no registration, so a namespace set up for an older release never fails a workflow task on it.
DEADLINE_MEMO = "grove-deadlines"

# name -> type as `temporal operator search-attribute create` and `temporal server start-dev` spell it
SEARCH_ATTRIBUTES: dict[str, str] = {
    GROVE_NAMESPACE.name: "Keyword",
    GROVE_PCS.name: "Keyword",
    GROVE_REPLICA.name: "Int",
    GROVE_PHASE.name: "Keyword",
    GROVE_PAUSED.name: "Bool",
}


# --- visibility ------------------------------------------------------------------------------------------------------
def quote(value: str) -> str:
    """A visibility-query string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def replica_query(*, namespace: str | None = None, pcs: str | None = None, phase: str | None = None,
                  running_only: bool = True) -> str:
    """The visibility query for replica workflows, optionally of one namespace, one PCS or one phase."""
    clauses = [f"WorkflowType = {quote(REPLICA_WORKFLOW)}"]
    if running_only:
        clauses.append("ExecutionStatus = 'Running'")
    if namespace:
        clauses.append(f"{GROVE_NAMESPACE.name} = {quote(namespace)}")
    if pcs:
        clauses.append(f"{GROVE_PCS.name} = {quote(pcs)}")
    if phase:
        clauses.append(f"{GROVE_PHASE.name} = {quote(phase)}")
    return " AND ".join(clauses)


def rollout_query(*, namespace: str, pcs: str) -> str:
    """The visibility query for the running rollout workflow of one PodCliqueSet."""
    return " AND ".join([f"WorkflowType = {quote(ROLLOUT_WORKFLOW)}", "ExecutionStatus = 'Running'",
                         f"{GROVE_NAMESPACE.name} = {quote(namespace)}", f"{GROVE_PCS.name} = {quote(pcs)}"])
