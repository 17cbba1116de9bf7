"""A PodCliqueSet's status figures (`replicas`, `availableReplicas`, `hpaPodSelector`) from its objects.

A replica counts as available the way grove.availability.replica_available decides, read from what the status
mirror wrote: every standalone PodClique has minAvailable Ready pods and every PCSG has minAvailable available
replicas. Pure: the objects come from the apiserver (activities/status.py) or the leader's watch cache
(worker/pcs_status.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from grove import names
from grove.models.podcliqueset import wanted_replicas
from grove.scale import podcliqueset_selector

Object = Mapping[str, Any]


def pcs_figures(pcs: Object, pod_cliques: Iterable[Object], scaling_groups: Iterable[Object]) -> dict[str, Any] | None:
    """The figures to write, or None while the spec is invalid (the last mirrored figures stand). Objects being
    deleted, and PodCliques of a PCSG (its own availableReplicas speaks for them), do not count."""
    wanted = wanted_replicas(dict(pcs))
    if wanted is None:
        return None
    members: dict[str, list[bool]] = defaultdict(list)
    for pclq in pod_cliques:
        labels = pclq["metadata"].get("labels") or {}
        index = labels.get(names.LABEL_PCS_REPLICA_INDEX)
        if index is not None and names.LABEL_PCSG not in labels and not pclq["metadata"].get("deletionTimestamp"):
            members[str(index)].append(pclq_available(pclq))
    for group in scaling_groups:
        index = (group["metadata"].get("labels") or {}).get(names.LABEL_PCS_REPLICA_INDEX)
        if index is not None and not group["metadata"].get("deletionTimestamp"):
            members[str(index)].append(pcsg_available(group))
    available = sum(1 for index, ok in members.items() if index.isdigit() and int(index) < wanted and all(ok))
    name = str(pcs["metadata"]["name"])
    return {"replicas": wanted, "availableReplicas": available, "hpaPodSelector": podcliqueset_selector(name)}


def pcsg_available(group: Object) -> bool:
    status, spec = group.get("status") or {}, group.get("spec") or {}
    return int(status.get("availableReplicas") or 0) >= int(spec.get("minAvailable") or 1)


def pclq_available(pclq: Object) -> bool:
    status, spec = pclq.get("status") or {}, pclq.get("spec") or {}
    ready = int(status.get("readyReplicas") or 0)
    return ready >= int(spec.get("minAvailable") or spec.get("replicas") or 1)


def has_scaling_groups(pcs: Object) -> bool:
    return bool(((pcs.get("spec") or {}).get("template") or {}).get("podCliqueScalingGroups"))
