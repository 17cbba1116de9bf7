"""B3's floor: a minimal direct client that makes the objects the product makes for each replica and removes the
same gates, with no Temporal, no reads, no status writes (issue 17).

`materialise` creates one replica's objects from the product's own plan and manifests, in the product's order
(Service, PodCliqueScalingGroups, PodCliques, PodGangs, native PodGroups for the `kube` backend, pods, then the
PodGangs' pod references), each create once, nothing read back. `materialise_all` runs it for every replica on
`threads` threads. The gates are removed by bench/floor.py (its own process, one pod watch), as in B1.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from activities.kubeapi import (
    JSON,
    NATIVE_PODGROUPS,
    PODCLIQUES,
    PODGANGS,
    PODS,
    SCALINGGROUPS,
    SERVICES,
    Kube,
    uid_of,
)
from activities.scaling import config_annotations
from grove import manifests, names
from grove.plan import plan_replica
from grove.scheduling import is_required, native_gang, native_podgroup_manifest, place_pod
from grove.validation import parse_pcs


def _owner(kind: str, obj: JSON) -> JSON:
    return manifests.owner_reference(names.GROVE_API_VERSION, kind, obj["metadata"]["name"], uid_of(obj))


def materialise(kube: Kube, pcs_obj: JSON, replica: int, backend: str) -> int:
    """Create replica `replica` of the created PodCliqueSet `pcs_obj`; returns the requests it made."""
    pcs, problems = parse_pcs(pcs_obj)
    assert pcs is not None and not problems, problems
    plan = plan_replica(pcs, replica)
    ns = plan.namespace
    owner = _owner(names.KIND_PODCLIQUESET, pcs_obj)
    kube.create(SERVICES, ns, manifests.service_manifest(plan, owner=owner))
    groups = {}
    for group in plan.scaling_groups:
        body = manifests.scaling_group_manifest(plan, group.name, owner=owner,
                                                annotations=config_annotations(pcs, group.config_name))
        groups[group.name] = kube.create(SCALINGGROUPS, ns, body)
    pclqs = {}
    for pclq in plan.pod_cliques:
        pclq_owner = owner if pclq.scaling_group is None else _owner(names.KIND_PODCLIQUESCALINGGROUP,
                                                                     groups[pclq.scaling_group.name])
        pclqs[pclq.name] = kube.create(PODCLIQUES, ns, manifests.podclique_manifest(pcs, plan, pclq.name,
                                                                                   owner=pclq_owner))
    gangs = {gang.name: kube.create(PODGANGS, ns, manifests.podgang_manifest(plan, gang.name, owner=owner))
             for gang in plan.pod_gangs}
    podgroups: dict[str, str] = {}
    if backend == names.BACKEND_KUBE:
        for gang in plan.pod_gangs:
            body = native_podgroup_manifest(native_gang(plan, gang), ns, uid_of(gangs[gang.name]))
            podgroups[gang.name] = kube.create(NATIVE_PODGROUPS, ns, body)["metadata"]["name"]
    requests = 1 + len(groups) + len(pclqs) + len(gangs) + len(podgroups)
    for pclq in plan.pod_cliques:
        pod_owner = _owner(names.KIND_PODCLIQUE, pclqs[pclq.name])
        for index in range(len(pclq.pod_names)):
            body = manifests.pod_manifest(pcs, plan, pclq.name, index, owner=pod_owner)
            if backend == names.BACKEND_KUBE and is_required(plan, pclq.name, index):
                body = place_pod(body, backend, podgroups[pclq.pod_gang])
            else:
                body = place_pod(body, backend)
            kube.create(PODS, ns, body)
            requests += 1
    refs = {pclq.name: list(pclq.pod_names) for pclq in plan.pod_cliques}
    for gang in plan.pod_gangs:
        spec = manifests.podgang_manifest(plan, gang.name, refs, owner=owner)["spec"]
        kube.patch(PODGANGS, ns, gang.name, {"spec": {"podgroups": spec["podgroups"]}})
        requests += 1
    return requests


def materialise_all(kube: Kube, created: list[JSON], backend: str, threads: int = 8) -> int:
    """Every replica of every created PodCliqueSet, on `threads` threads; returns the requests made."""
    work: list[tuple[JSON, int]] = [(obj, i) for obj in created for i in range(int(obj["spec"]["replicas"]))]
    with ThreadPoolExecutor(threads) as pool:
        counts: list[Any] = list(pool.map(lambda item: materialise(kube, item[0], item[1], backend), work))
    return sum(counts)
