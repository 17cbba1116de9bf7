"""Why a base gang waits for placement, for `grove-temporal status` (best effort, read from Kubernetes).

The replica workflow knows that its base gang waits (ReplicaStatus.waiting_for) but not why: that is the
scheduler's word, in the native PodGroup's `PodGroupScheduled` condition and in the pods' `FailedScheduling` Events
(under the kube backend the per-pod message is mostly "waiting for minCount pods from a gang"; the one that names
the cause, e.g. "0/2 nodes are available: 2 Insufficient cpu", is the latest other one). The operator commands need
no kubeconfig, so this is read only when one is at hand ($KUBECONFIG or the running `grove-temporal run`'s); when
it cannot be read, the line says so instead of leaving the reason out silently.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any

from grove import names

GANG_WAIT_MESSAGE = "waiting for minCount pods from a gang"


def podgroup_lines(podgroups: Iterable[dict[str, Any]]) -> list[str]:
    """`PodGroup <name>: <reason> (<message>)` for every native PodGroup whose PodGroupScheduled is not True."""
    lines = []
    for group in podgroups:
        for condition in (group.get("status") or {}).get("conditions") or []:
            if condition.get("type") == "PodGroupScheduled" and condition.get("status") != "True":
                detail = f" ({condition['message']})" if condition.get("message") else ""
                lines.append(f"PodGroup {group['metadata']['name']}: {condition.get('reason') or 'not scheduled'}"
                             f"{detail}")
    return lines


def scheduler_message(events: Iterable[dict[str, Any]], pods_of: Sequence[str]) -> str | None:
    """The latest FailedScheduling message of a pod of the PodCliques `pods_of` that names a cause (not the gang's
    own wait), else the latest one at all."""
    def when(event: dict[str, Any]) -> str:
        return str(event.get("lastTimestamp") or event.get("eventTime") or
                   (event.get("metadata") or {}).get("creationTimestamp") or "")

    mine = sorted((e for e in events if e.get("reason") == "FailedScheduling"
                   and any(str((e.get("involvedObject") or {}).get("name", "")).startswith(f"{p}-") for p in pods_of)),
                  key=when)
    causes = [e for e in mine if GANG_WAIT_MESSAGE not in str(e.get("message", ""))]
    chosen = (causes or mine)[-1:] if mine else []
    return str(chosen[0].get("message", "")).strip() if chosen else None


def kubeconfig() -> str | None:
    """$KUBECONFIG's first existing file, else the running `grove-temporal run`'s, else ~/.kube/config."""
    from worker.kubecontext import kubeconfig_paths
    from worker.stacks import live_records

    if os.environ.get("KUBECONFIG"):
        return next((str(p) for p in kubeconfig_paths() if p.exists()), None)
    records = live_records()
    if records:
        return records[0].kubeconfig
    return next((str(p) for p in kubeconfig_paths() if p.exists()), None)


def placement_reasons(status: Any) -> list[str]:
    """Lines explaining why the base gang of `status` (a ReplicaStatus) is not placed; [] when it is not waiting."""
    if not status.waiting_for:
        return []
    try:
        from activities.kubeapi import EVENTS, NATIVE_PODGROUPS, Kube, api_client

        kube = Kube(api_client(kubeconfig(), pool_size=2), timeout=5.0)
        try:
            ref = status.ref
            lines = []
            if status.scheduler_backend == names.BACKEND_KUBE:
                selector = (f"{names.replica_selector(ref.pcs, ref.replica)},"
                            f"{names.LABEL_COMPONENT}={names.COMPONENT_NATIVE_PODGROUP}")
                lines += podgroup_lines(kube.list_items(NATIVE_PODGROUPS, ref.namespace, label_selector=selector))
            message = scheduler_message(kube.list_items(EVENTS, ref.namespace,
                                                        field_selector="reason=FailedScheduling"),
                                        status.waiting_for)
            if message:
                lines.append(f"scheduler: {message}")
            return lines
        finally:
            kube.api_client.close()
    except Exception as exc:  # noqa: BLE001 - an optional read: say why it is missing, never fail the status
        return [f"(the scheduler's reason was not read from Kubernetes: {type(exc).__name__}: {exc})"]
