"""Kubernetes Events on the PodCliqueSet: what `kubectl describe pcs` shows an operator.

Best effort by design: an Event that cannot be written is logged, never a reason to fail (and retry) the action it
describes, which already happened.
"""

from __future__ import annotations

import logging
import os
import socket
from datetime import UTC, datetime

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
        "metadata": {"generateName": f"{pcs}.", "namespace": namespace},
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
        log.warning("could not record event %s on %s/%s: %s", reason, namespace, pcs, exc)
