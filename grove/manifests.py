"""Kubernetes objects of one replica as plain dicts, built from a ReplicaPlan (the activity layer sends them).

Owner references carry UIDs only the cluster knows, so builders take them as an argument. Pods are created gated
with SCHEDULING_GATE; releasing removes that gate only (see `without_grove_gate`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from grove import names
from grove.durations import format_duration
from grove.models import PodCliqueSet, PodCliqueTemplateSpec
from grove.plan import ReplicaPlan
from grove.startup import add_startup_wait, wait_image

Manifest = dict[str, Any]


def owner_reference(api_version: str, kind: str, name: str, uid: str, *, controller: bool = True) -> Manifest:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": controller,
        "blockOwnerDeletion": True,
    }


def _metadata(name: str, plan: ReplicaPlan, labels: Mapping[str, str], owner: Manifest | None) -> Manifest:
    meta: Manifest = {"name": name, "namespace": plan.namespace, "labels": dict(labels)}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return meta


def _template(pcs: PodCliqueSet, clique: str) -> PodCliqueTemplateSpec:
    for template in pcs.spec.template.cliques:
        if template.name == clique:
            return template
    raise KeyError(f"no clique named {clique!r} in PodCliqueSet {pcs.name}")


def podclique_manifest(
    pcs: PodCliqueSet, plan: ReplicaPlan, pod_clique: str, owner: Manifest | None = None
) -> Manifest:
    """The PodClique object; owner is the PCS for standalone PodCliques and the PCSG for grouped ones."""
    pclq = plan.pod_clique(pod_clique)
    template = _template(pcs, pclq.clique)
    spec = template.spec.model_copy(update={"min_available": pclq.min_available}).to_wire()
    meta = _metadata(pclq.name, plan, pclq.labels, owner)
    if template.annotations:
        meta["annotations"] = dict(template.annotations)
    return {
        "apiVersion": names.GROVE_API_VERSION,
        "kind": names.KIND_PODCLIQUE,
        "metadata": meta,
        "spec": spec,
    }


def scaling_group_manifest(plan: ReplicaPlan, scaling_group: str, owner: Manifest | None = None,
                           annotations: Mapping[str, str] | None = None) -> Manifest:
    """The PCSG object; `annotations` are its config's (podCliqueScalingGroups[].annotations, as Grove copies them)."""
    group = plan.scaling_group(scaling_group)
    spec: Manifest = {
        "replicas": group.replicas,
        "minAvailable": group.min_available,
        "cliqueNames": list(group.clique_names),
    }
    if group.termination_delay is not None:
        spec["terminationDelay"] = format_duration(group.termination_delay)
    meta = _metadata(group.name, plan, group.labels, owner)
    if annotations:
        meta["annotations"] = dict(annotations)
    return {
        "apiVersion": names.GROVE_API_VERSION,
        "kind": names.KIND_PODCLIQUESCALINGGROUP,
        "metadata": meta,
        "spec": spec,
    }


def podgang_manifest(
    plan: ReplicaPlan,
    pod_gang: str,
    pod_references: Mapping[str, Sequence[str]] | None = None,
    owner: Manifest | None = None,
    priority_class_name: str | None = None,
) -> Manifest:
    """The PodGang object. pod_references maps a PodClique name to the names of its live pods (DESIGN §3: fill
    podReferences from the live pods); PodCliques without an entry get an empty list."""
    gang = plan.pod_gang(pod_gang)
    refs = pod_references or {}
    priority_class_name = priority_class_name or plan.priority_class_name
    spec: Manifest = {
        "podgroups": [
            {
                "name": group.name,
                "podReferences": [
                    {"namespace": plan.namespace, "name": pod} for pod in sorted(refs.get(group.name, ()))
                ],
                "minReplicas": group.min_replicas,
            }
            for group in gang.pod_groups
        ]
    }
    if priority_class_name:
        spec["priorityClassName"] = priority_class_name
    return {
        "apiVersion": names.SCHEDULER_API_VERSION,
        "kind": names.KIND_PODGANG,
        "metadata": _metadata(gang.name, plan, gang.labels, owner),
        "spec": spec,
    }


def service_manifest(plan: ReplicaPlan, owner: Manifest | None = None) -> Manifest:
    service = plan.service
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(service.name, plan, service.labels, owner),
        "spec": {
            "clusterIP": "None",
            "selector": dict(service.selector),
            "publishNotReadyAddresses": service.publish_not_ready_addresses,
        },
    }


def pod_manifest(
    pcs: PodCliqueSet, plan: ReplicaPlan, pod_clique: str, index: int, owner: Manifest | None = None
) -> Manifest:
    """A gated pod of one PodClique: the clique's podSpec plus hostname, subdomain, gate, labels and env vars."""
    identity = plan.pod(pod_clique, index)
    template = _template(pcs, identity.clique)
    spec: Manifest = copy.deepcopy(template.spec.pod_spec)
    spec["hostname"] = identity.hostname
    spec["subdomain"] = identity.subdomain
    gates = [g for g in spec.get("schedulingGates") or [] if g.get("name") != names.SCHEDULING_GATE]
    spec["schedulingGates"] = [*gates, {"name": names.SCHEDULING_GATE}]
    if pcs.spec.template.priority_class_name and "priorityClassName" not in spec:
        spec["priorityClassName"] = pcs.spec.template.priority_class_name
    for key in ("containers", "initContainers"):
        for container in spec.get(key) or []:
            container["env"] = _with_env(container.get("env") or [], identity.env)
    meta = _metadata(identity.name, plan, identity.labels, owner)
    annotations = dict(template.annotations or {})
    starts_after = plan.pod_clique(pod_clique).starts_after
    if starts_after:
        add_startup_wait(spec, annotations, starts_after, wait_image(pcs))
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _with_env(existing: list[Manifest], grove_env: Mapping[str, str]) -> list[Manifest]:
    # The GROVE_* variables are the pod's identity: ours replace a user's variable of the same name.
    kept = [item for item in existing if item.get("name") not in grove_env]
    return kept + [{"name": key, "value": value} for key, value in grove_env.items()]


def without_grove_gate(scheduling_gates: Sequence[Mapping[str, Any]] | None) -> list[Manifest]:
    """The gates left after releasing a pod: ours removed, anyone else's kept (DESIGN §3)."""
    return [dict(g) for g in scheduling_gates or [] if g.get("name") != names.SCHEDULING_GATE]


def has_grove_gate(scheduling_gates: Sequence[Mapping[str, Any]] | None) -> bool:
    return any(g.get("name") == names.SCHEDULING_GATE for g in scheduling_gates or [])
