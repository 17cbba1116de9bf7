"""What the fault runs drive: PodCliqueSets chosen so that every phase of a replica is present while faults hit,
and foreign objects (some dressed as ours) that nothing may touch.

| PCS     | shape                                                            | delay (PCS / PCSG) | role                      |
|---------|------------------------------------------------------------------|--------------------|---------------------------|
| avail   | frontend 2/2, api 2/1                                            | 3s                 | Available, PCS-replica terminations |
| slow    | frontend 2/2, api 1/1                                            | 12s                | breached with a deadline pending through faults; healed before it |
| pcsg    | router 1/1; prefill x3 (min 2) of leader 1/1 + worker 2/2         | 10s / 3s           | PCSG-replica terminations, base and scaled gangs |
| pcsgw   | router 1/1; decode x2 (min 2) of worker 2/2                      | 10s / 4s           | PCSG breached as a whole → PCS replica |
| gated   | big 1/1 (asks for more CPU than any node has); extra x2 (min 1) of w 1/1 | 3s          | Scheduling forever: its scaled gang must never be released |
| paused  | frontend 2/2                                                     | 3s                 | paused: breaches held, never terminated |
| nodelay | frontend 2/2                                                     | none               | breached with termination off |

Sizes are clique `replicas/minAvailable`. Every PCS has `spec.replicas` = the runner's `--replicas`.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field
from datetime import timedelta

from activities.kubeapi import JSON
from grove import names
from grove.plan import ReplicaPlan, plan_replica
from grove.validation import parse_pcs

FOREIGN_MARK = "foreign"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"


def _clique(name: str, replicas: int, min_available: int, cpu: str = "10m") -> JSON:
    return {
        "name": name,
        "spec": {
            "roleName": name,
            "replicas": replicas,
            "minAvailable": min_available,
            "podSpec": {"containers": [{"name": name, "image": PAUSE_IMAGE,
                                        "resources": {"requests": {"cpu": cpu, "memory": "16Mi"}}}]},
        },
    }


@dataclass(frozen=True)
class WorkloadPcs:
    name: str
    role: str
    cliques: tuple[JSON, ...]
    scaling_groups: tuple[JSON, ...] = ()
    delay: str | None = None
    paused: bool = False
    breakable: bool = True  # the runner makes its pods fail readiness
    schedulable: bool = True

    def manifest(self, namespace: str, replicas: int) -> JSON:
        template: JSON = {"cliques": [copy.deepcopy(c) for c in self.cliques]}
        if self.scaling_groups:
            template["podCliqueScalingGroups"] = [copy.deepcopy(g) for g in self.scaling_groups]
        if self.delay:
            template["terminationDelay"] = self.delay
        return {
            "apiVersion": names.GROVE_API_VERSION,
            "kind": names.KIND_PODCLIQUESET,
            "metadata": {"name": self.name, "namespace": namespace, "labels": {"grove-temporal.io/faults": "true"}},
            "spec": {"replicas": replicas, "template": template},
        }


WORKLOAD: tuple[WorkloadPcs, ...] = (
    WorkloadPcs("avail", "available; PCS-replica terminations", (_clique("frontend", 2, 2), _clique("api", 2, 1)),
                delay="3s"),
    WorkloadPcs("slow", "deadlines pending through faults; heals before the delay",
                (_clique("frontend", 2, 2), _clique("api", 1, 1)), delay="12s"),
    WorkloadPcs("pcsg", "PCSG-replica terminations (base and scaled gangs)", (_clique("router", 1, 1),
                _clique("leader", 1, 1), _clique("worker", 2, 2)),
                scaling_groups=({"name": "prefill", "replicas": 3, "minAvailable": 2, "terminationDelay": "3s",
                                 "cliqueNames": ["leader", "worker"]},), delay="10s"),
    WorkloadPcs("pcsgw", "PCSG breached as a whole", (_clique("router", 1, 1), _clique("worker", 2, 2)),
                scaling_groups=({"name": "decode", "replicas": 2, "minAvailable": 2, "terminationDelay": "4s",
                                 "cliqueNames": ["worker"]},), delay="10s"),
    WorkloadPcs("gated", "base gang never schedulable; scaled gang must stay gated",
                (_clique("big", 1, 1, cpu="1000"), _clique("w", 1, 1)),
                scaling_groups=({"name": "extra", "replicas": 2, "minAvailable": 1, "cliqueNames": ["w"]},),
                delay="3s", breakable=False, schedulable=False),
    WorkloadPcs("paused", "paused: breaches held", (_clique("frontend", 2, 2),), delay="3s", paused=True),
    WorkloadPcs("nodelay", "termination off", (_clique("frontend", 2, 2),)),
)


@dataclass
class Workload:
    """The PCSes of one run, their replica plans (grove.plan: what must exist) and their UIDs once created."""

    namespace: str
    replicas: int
    pcses: tuple[WorkloadPcs, ...] = WORKLOAD
    uids: dict[str, str] = field(default_factory=dict)

    def by_name(self, name: str) -> WorkloadPcs:
        return next(p for p in self.pcses if p.name == name)

    @functools.cached_property
    def plans(self) -> dict[tuple[str, int], ReplicaPlan]:
        """(pcs, replica) -> its plan, from the manifests exactly as applied."""
        plans = {}
        for pcs in self.pcses:
            model, problems = parse_pcs(pcs.manifest(self.namespace, self.replicas))
            assert model is not None and not problems, problems
            for replica in range(self.replicas):
                plans[(pcs.name, replica)] = plan_replica(model, replica)
        return plans

    def delay_of(self, pcs: str, pclq: str) -> timedelta | None:
        """Effective terminationDelay of the scope a PodClique belongs to (None: termination off)."""
        plan = next(p for (name, _), p in self.plans.items() if name == pcs and
                    any(c.name == pclq for c in p.pod_cliques))
        pclq_plan = plan.pod_clique(pclq)
        return plan.effective_delay(pclq_plan.scaling_group.name if pclq_plan.scaling_group else None)


# --- foreign objects ---------------------------------------------------------------------------------------------
def lookalike_labels(pcs: str, replica: int, **extra: str) -> dict[str, str]:
    return {names.LABEL_MANAGED_BY: names.MANAGED_BY, names.LABEL_PART_OF: pcs,
            names.LABEL_PCS_REPLICA_INDEX: str(replica), **extra}


def foreign_objects(node: str) -> list[tuple[str, JSON]]:
    """(kind, body) of objects that are not ours: plain ones, and look-alikes carrying our labels (even our
    scheduling gate) for replica 0 of `avail` and `pcsg`. Pods are pinned to `node`, which the runner never loses."""
    container = {"name": "c", "image": PAUSE_IMAGE, "resources": {"requests": {"cpu": "1m", "memory": "1Mi"}}}
    pinned: JSON = {"nodeSelector": {"kubernetes.io/hostname": node}, "containers": [container]}

    def pod(name: str, labels: dict[str, str], spec: JSON) -> tuple[str, JSON]:
        return "Pod", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}, "spec": spec}

    def config_map(name: str, labels: dict[str, str]) -> tuple[str, JSON]:
        return "ConfigMap", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels},
                             "data": {"owner": "somebody else"}}

    frontend = lookalike_labels("avail", 0, **{names.LABEL_PODCLIQUE: "avail-0-frontend",
                                               names.LABEL_PODGANG: "avail-0",
                                               names.LABEL_COMPONENT: names.COMPONENT_PCS_PODCLIQUE})
    scaled = lookalike_labels("pcsg", 0, **{names.LABEL_PODCLIQUE: "pcsg-0-prefill-2-worker",
                                            names.LABEL_PODGANG: "pcsg-0-prefill-0",
                                            names.LABEL_BASE_PODGANG: "pcsg-0",
                                            names.LABEL_COMPONENT: names.COMPONENT_PCSG_PODCLIQUE})
    gate = [{"name": names.SCHEDULING_GATE}]
    return [
        pod(f"{FOREIGN_MARK}-plain", {"app": "someone-else"}, pinned),
        pod(f"{FOREIGN_MARK}-avail-0-frontend", frontend, pinned),
        pod(f"{FOREIGN_MARK}-avail-0-frontend-gated", frontend, {**pinned, "schedulingGates": gate}),
        pod(f"{FOREIGN_MARK}-pcsg-0-scaled-gated", scaled, {**pinned, "schedulingGates": gate}),
        config_map(f"{FOREIGN_MARK}-plain", {"app": "someone-else"}),
        config_map(f"{FOREIGN_MARK}-avail-0", lookalike_labels("avail", 0)),
    ]
