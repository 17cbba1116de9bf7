"""Gang scheduling backends (DESIGN §4b): who places a replica's PodGangs, and the native PodGroups of `kube`.

Backends, chosen per worker (`--scheduler-backend`) and per PodCliqueSet (annotation
`grove-temporal.io/scheduler-backend`, which wins):
- `kube`: Kubernetes' own gang scheduling (KEP-4671, `scheduling.k8s.io/v1alpha2` PodGroup with a gang policy;
  kube-apiserver feature gate `GenericWorkload`, kube-scheduler `GenericWorkload` + `GangScheduling`).
- `kai`: pods carry KAI's schedulerName; KAI reads the Grove PodGangs (its Grove podgrouper).
- `none`: our scheduling gates only; the default scheduler places pods one by one.
The gates of DESIGN §4.3 stay in every backend: scaled gangs wait for the base gang to be scheduled.

How a Grove PodGang maps onto native PodGroups (Kubernetes 1.36). A PodGang has podgroups (one per PodClique),
each with its own minReplicas (the PodClique's minAvailable); a native PodGroup has a single gang `minCount` and
no inner structure (nesting, CompositePodGroup, only arrives with `scheduling.k8s.io/v1beta1`). So:
- each PodGang incarnation gets ONE native PodGroup (`names.native_podgroup_name`), owned by the PodGang, gang
  policy, `minCount` = the sum of its podgroups' minReplicas;
- its members are exactly the *required* pods: pod indices 0 … minReplicas-1 of each PodClique of the gang. The
  group holds exactly `minCount` pods, so the scheduler binds all of them or none: it can never choose a subset
  that meets the sum but leaves one PodClique below its own minimum (which a group with every pod and the summed
  minCount would allow);
- *surplus* pods (index >= minReplicas, only when minAvailable < replicas) carry no scheduling group and keep our
  gate until every podgroup of their PodGang has minReplicas pods scheduled: they never take capacity the gang
  needs, and then schedule one by one (Grove's KAI backend places them in the same cycle, best effort).
What cannot be expressed: per-podgroup minimums inside one native gang (hence the split above), "any k of n"
elasticity within a PodClique (which pods are required is decided by index, not by the scheduler), the seed-001
`minSubGroup` tree, topologyConstraint (needs TopologyAwareWorkloadScheduling) and the PodGang's
priorityClassName (a v1alpha2 PodGroup has none; pods keep theirs). `minCount` is immutable in v1alpha2: a
changed minAvailable applies to the next PodGang incarnation.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from grove import names
from grove.manifests import owner_reference
from grove.models import PodCliqueSet
from grove.plan import PodGangPlan, ReplicaPlan

Manifest = dict[str, Any]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# --- choosing a backend ------------------------------------------------------------------------------------
def chosen_backend(pcs: PodCliqueSet, default: str) -> str:
    """The PCS annotation if it names a backend, else the worker's default (an invalid value makes the PCS invalid:
    grove.validation)."""
    value = (pcs.metadata.annotations or {}).get(names.ANNOTATION_SCHEDULER_BACKEND)
    return value if value in names.BACKEND_VALUES else default


# --- the native PodGroups of the kube backend ---------------------------------------------------------------
class NativeGang(_Frozen):
    """What one PodGang becomes in the PodGroup API (the object's name needs the PodGang's UID)."""

    pod_gang: str
    min_count: int
    members: tuple[str, ...]  # the required pods: they carry spec.schedulingGroup
    labels: dict[str, str]


def native_gang(plan: ReplicaPlan, gang: PodGangPlan) -> NativeGang:
    members = tuple(pod for group in gang.pod_groups for pod in group.pod_names[: group.min_replicas])
    labels = {
        **gang.labels,
        names.LABEL_COMPONENT: names.COMPONENT_NATIVE_PODGROUP,
        names.LABEL_PODGANG: gang.name,
    }
    # No app.kubernetes.io/name: `<podgang>-<uid>` may be longer than a label value may be (63); the podgang label
    # says whose it is.
    labels.pop(names.LABEL_NAME, None)
    return NativeGang(pod_gang=gang.name, min_count=len(members), members=members, labels=labels)


def native_gangs(plan: ReplicaPlan) -> tuple[NativeGang, ...]:
    return tuple(native_gang(plan, gang) for gang in plan.pod_gangs)


def is_required(plan: ReplicaPlan, pod_clique: str, index: int) -> bool:
    """A pod the gang needs (index below its PodClique's minAvailable), as opposed to a surplus pod."""
    return index < plan.pod_clique(pod_clique).min_available


def native_podgroup_manifest(gang: NativeGang, namespace: str, pod_gang_uid: str) -> Manifest:
    """The PodGroup of one PodGang incarnation, owned (and garbage-collected) with that PodGang."""
    name = names.native_podgroup_name(gang.pod_gang, pod_gang_uid)
    return {
        "apiVersion": names.NATIVE_SCHEDULING_API_VERSION,
        "kind": names.KIND_NATIVE_PODGROUP,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(gang.labels),
            "ownerReferences": [
                owner_reference(names.SCHEDULER_API_VERSION, names.KIND_PODGANG, gang.pod_gang, pod_gang_uid)
            ],
        },
        "spec": {"schedulingPolicy": {"gang": {"minCount": gang.min_count}}},
    }


def gang_scheduled(gang: PodGangPlan, scheduled: Mapping[str, int]) -> bool:
    """Every podgroup (PodClique) of the gang has at least minReplicas pods scheduled."""
    return all(scheduled.get(group.name, 0) >= group.min_replicas for group in gang.pod_groups)


def held_surplus_pods(plan: ReplicaPlan, scheduled: Mapping[str, int]) -> frozenset[str]:
    """Surplus pods (index >= minReplicas) of every PodGang not scheduled yet: the kube backend keeps their gate
    so that they never take capacity their gang needs (see the module docstring)."""
    held: set[str] = set()
    for gang in plan.pod_gangs:
        if not gang_scheduled(gang, scheduled):
            for group in gang.pod_groups:
                held.update(group.pod_names[group.min_replicas:])
    return frozenset(held)


# --- pods ----------------------------------------------------------------------------------------------------
def place_pod(body: Manifest, backend: str, native_podgroup: str | None = None) -> Manifest:
    """A pod manifest for the backend: `kube` links a required pod to its native PodGroup (immutable after
    creation); `kai` names KAI's scheduler. A schedulerName the user wrote in the pod template is kept."""
    placed = copy.deepcopy(body)
    spec = placed.setdefault("spec", {})
    if backend == names.BACKEND_KUBE and native_podgroup is not None:
        spec["schedulingGroup"] = {"podGroupName": native_podgroup}
    elif backend == names.BACKEND_KAI and not spec.get("schedulerName"):
        spec["schedulerName"] = names.KAI_SCHEDULER_NAME
    return placed


def scheduling_group_of(pod: Mapping[str, Any]) -> str | None:
    """The native PodGroup a pod object is linked to, if any."""
    group = (pod.get("spec") or {}).get("schedulingGroup") or {}
    name = group.get("podGroupName")
    return str(name) if name else None
