"""Kubernetes Events on the PodCliqueSet: what `kubectl describe pcs` shows an operator.

Best effort by design: an Event that cannot be written is logged, never a reason to fail (and retry) the action it
describes, which already happened.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
from datetime import UTC, datetime

from temporalio import activity

from activities.kubeapi import EVENTS, Kube, KubeError
from grove import names
from workflows.messages import ReplicaRef

log = logging.getLogger(__name__)

COMPONENT = "grove-temporal"
MAX_MESSAGE = 1000
_INSTANCE = os.environ.get("POD_NAME") or socket.gethostname()


def record(kube: Kube, ref: ReplicaRef, reason: str, message: str, *, type: str = "Normal") -> None:
    record_for_pcs(kube, ref.namespace, ref.pcs, ref.pcs_uid, reason, f"replica {ref.replica}: {message}", type=type)


def record_for_pcs(
    kube: Kube, namespace: str, pcs: str, pcs_uid: str, reason: str, message: str, *, type: str = "Normal"
) -> None:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {**_identity(namespace, pcs, reason), "namespace": namespace},
        "involvedObject": {
            "apiVersion": names.GROVE_API_VERSION,
            "kind": names.KIND_PODCLIQUESET,
            "name": pcs,
            "namespace": namespace,
            "uid": pcs_uid,
        },
        "reason": reason,
        "message": message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 1] + "…",
        "type": type,
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": _INSTANCE,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    try:
        kube.create(EVENTS, namespace, body)
    except KubeError as exc:
        if exc.conflict:
            return  # a retried activity: its first attempt already recorded this very Event
        log.warning("could not record event %s on %s/%s: %s", reason, namespace, pcs, exc)


def _identity(namespace: str, pcs: str, reason: str) -> dict[str, str]:
    """Inside an activity, a name fixed by the activity (run id + activity id survive retries), so a retry after
    a lost response cannot record the Event twice; elsewhere a generated name."""
    try:
        info = activity.info()
    except RuntimeError:
        return {"generateName": f"{pcs}."}
    key = f"{info.workflow_run_id}/{info.activity_id}/{namespace}/{pcs}/{reason}"
    return {"name": f"{pcs}.{hashlib.sha256(key.encode()).hexdigest()[:16]}"}
