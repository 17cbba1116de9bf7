"""Workflow identities: the one place that spells workflow ids and the task queue default.

A replica workflow id names the PCS by namespace, name and UID so that a PCS deleted and recreated under the same
name (new UID) gets fresh workflows instead of inheriting the old replica's memory.
"""

from __future__ import annotations

from dataclasses import dataclass

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

# Message names shared by the watcher, the CLI and the workflows.
NUDGE_SIGNAL = "nudge"
PCS_CHANGED_SIGNAL = "pcs_changed"

# Rolling updates: the PCS-level rollout workflow (one per PCS UID) grants turns to replica workflows.
ROLLOUT_WORKFLOW_PREFIX = "rollout"
ROLLOUT_TURN_SIGNAL = "rollout_turn"
ROLLOUT_REPORT_SIGNAL = "rollout_report"


def rollout_workflow_id(namespace: str, pcs: str, pcs_uid: str) -> str:
    return f"{ROLLOUT_WORKFLOW_PREFIX}/{namespace}/{pcs}/{pcs_uid}"
