"""A PodCliqueSet's status figures (`replicas`, `availableReplicas`, `hpaPodSelector`) from its objects.

A replica counts as available the way grove.availability.replica_available decides, read from the PodCliques'
`readyReplicas`: every standalone PodClique has minAvailable Ready pods and every PCSG has minAvailable replicas whose
PodCliques all do (the rule the PCSG's own availableReplicas follows). Not from the PCSG's availableReplicas: the
replica workflow writes that in its rounds, and a round may wait for the status window, where the PodCliques' counts
are the leader's, a second behind the pods (worker/clique_counts.py). Pure: the objects come from the apiserver (activities/status.py) or the leader's watch cache
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
    group_members: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for pclq in pod_cliques:
        labels = pclq["metadata"].get("labels") or {}
        index = labels.get(names.LABEL_PCS_REPLICA_INDEX)
        if index is None or pclq["metadata"].get("deletionTimestamp"):
            continue
        if names.LABEL_PCSG in labels:
            group_index = str(labels.get(names.LABEL_PCSG_REPLICA_INDEX, ""))
            group_members[str(labels[names.LABEL_PCSG])][group_index].append(pclq_available(pclq))
        else:
            members[str(index)].append(pclq_available(pclq))
    for group in scaling_groups:
        index = (group["metadata"].get("labels") or {}).get(names.LABEL_PCS_REPLICA_INDEX)
        if index is not None and not group["metadata"].get("deletionTimestamp"):
            members[str(index)].append(pcsg_available(group, group_members.get(str(group["metadata"]["name"]), {})))
    available = sum(1 for index, ok in members.items() if index.isdigit() and int(index) < wanted and all(ok))
    name = str(pcs["metadata"]["name"])
    return {"replicas": wanted, "availableReplicas": available, "hpaPodSelector": podcliqueset_selector(name)}


def pcsg_available(group: Object, members: Mapping[str, list[bool]]) -> bool:
    """`members`: PCSG replica index -> whether each of its PodCliques (those not being deleted) is available. A
    replica missing one of its PodCliques is not available (grove.availability.scaling_group_health)."""
    spec = group.get("spec") or {}
    wanted = len(spec.get("cliqueNames") or ())
    available = sum(1 for j in range(int(spec.get("replicas") or 0))
                    if (found := members.get(str(j))) and len(found) >= wanted and all(found))
    return available >= int(spec.get("minAvailable") or 1)


def pclq_available(pclq: Object) -> bool:
    status, spec = pclq.get("status") or {}, pclq.get("spec") or {}
    ready = int(status.get("readyReplicas") or 0)
    return ready >= int(spec.get("minAvailable") or spec.get("replicas") or 1)


def has_scaling_groups(pcs: Object) -> bool:
    return bool(((pcs.get("spec") or {}).get("template") or {}).get("podCliqueScalingGroups"))
