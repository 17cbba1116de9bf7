"""HorizontalPodAutoscalers of one replica (DESIGN §4.10; Grove's HPA component).

A standalone clique with `spec.autoScalingConfig` gets one `autoscaling/v2` HPA per replica targeting its PodClique;
a scaling group with `scaleConfig` gets one targeting its PodCliqueScalingGroup. Both kinds serve the scale
subresource (`spec.replicas`, `status.replicas`, and `status.hpaPodSelector` / `status.selector` for the HPA's pod
metrics), so the HPA writes the object's count and grove.scale keeps it. Like Grove: named after the target,
labelled `app.kubernetes.io/component=pcs-hpa`, controlled by the PodCliqueSet; minReplicas defaults to the
template's replicas; metrics unset means the HPA's own default (80% average CPU).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from grove import names
from grove.models import AutoScalingConfig, PodCliqueSet
from grove.problems import Problem

if TYPE_CHECKING:
    from grove.plan import ReplicaPlan

Manifest = dict[str, Any]


def hpa_targets(pcs: PodCliqueSet, plan: ReplicaPlan) -> list[tuple[str, str, AutoScalingConfig, int]]:
    """(kind, target name, config, template replicas) for every HPA replica `plan` should have."""
    grouped = {n for g in pcs.spec.template.pod_clique_scaling_groups for n in g.clique_names}
    found: list[tuple[str, str, AutoScalingConfig, int]] = []
    for clique in pcs.spec.template.cliques:
        if clique.spec.auto_scaling_config is not None and clique.name not in grouped:
            target = names.pclq_name(plan.pcs, plan.replica, clique.name)
            found.append((names.KIND_PODCLIQUE, target, clique.spec.auto_scaling_config, clique.spec.replicas))
    for group in pcs.spec.template.pod_clique_scaling_groups:
        if group.scale_config is not None:
            target = names.pcsg_name(plan.pcs, plan.replica, group.name)
            found.append((names.KIND_PODCLIQUESCALINGGROUP, target, group.scale_config,
                          1 if group.replicas is None else group.replicas))
    return found


def hpa_manifests(pcs: PodCliqueSet, plan: ReplicaPlan, owner: Manifest | None = None) -> list[Manifest]:
    return [_hpa(plan, kind, target, config, replicas, owner) for kind, target, config, replicas
            in hpa_targets(pcs, plan)]


def _hpa(plan: ReplicaPlan, kind: str, target: str, config: AutoScalingConfig, template_replicas: int,
         owner: Manifest | None) -> Manifest:
    name = names.hpa_name(target)
    spec: Manifest = {
        "scaleTargetRef": {"apiVersion": names.GROVE_API_VERSION, "kind": kind, "name": target},
        "minReplicas": template_replicas if config.min_replicas is None else config.min_replicas,
        "maxReplicas": config.max_replicas,
    }
    if config.metrics:
        spec["metrics"] = [dict(m) for m in config.metrics]
    metadata: Manifest = {
        "name": name,
        "namespace": plan.namespace,
        "labels": {
            names.LABEL_MANAGED_BY: names.MANAGED_BY,
            names.LABEL_PART_OF: plan.pcs,
            names.LABEL_NAME: name,
            names.LABEL_COMPONENT: names.COMPONENT_HPA,
            names.LABEL_PCS_REPLICA_INDEX: str(plan.replica),
        },
    }
    if owner is not None:
        metadata["ownerReferences"] = [owner]
    return {"apiVersion": names.HPA_API_VERSION, "kind": names.KIND_HPA, "metadata": metadata, "spec": spec}


def hpa_differs(current: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """True when the stored HPA's spec is not the desired one (fields the apiserver defaults are not compared)."""
    have, want = current.get("spec") or {}, desired["spec"]
    if any(have.get(key) != value for key, value in want.items()):
        return True
    return "metrics" not in want and bool(have.get("metrics")) and have.get("metrics") != _DEFAULT_METRICS


# What the apiserver stores for an HPA created without metrics (autoscaling/v2 defaulting: 80% average CPU).
_DEFAULT_METRICS = [{"type": "Resource", "resource": {"name": "cpu",
                                                      "target": {"type": "Utilization", "averageUtilization": 80}}}]


# --- validation (Grove's webhook rules, with field paths) --------------------------------------------------------
def autoscaling_problems(pcs: PodCliqueSet) -> Iterator[Problem]:
    template = pcs.spec.template
    owner = {n: i for i, g in enumerate(template.pod_clique_scaling_groups) for n in g.clique_names}
    for index, clique in enumerate(template.cliques):
        config = clique.spec.auto_scaling_config
        if config is None:
            continue
        path = f"spec.template.cliques[{index}].spec.autoScalingConfig"
        if clique.name in owner:
            yield Problem(path, f"not allowed on a clique of a scaling group (clique {clique.name!r} scales with "
                                f"podCliqueScalingGroups[{owner[clique.name]}]; use its scaleConfig)")
            continue
        min_available = clique.spec.min_available or clique.spec.replicas
        yield from _config_problems(path, config, clique.spec.replicas, min_available, "spec.minAvailable")
    for index, group in enumerate(template.pod_clique_scaling_groups):
        if group.scale_config is None:
            continue
        path = f"spec.template.podCliqueScalingGroups[{index}].scaleConfig"
        replicas = 1 if group.replicas is None else group.replicas
        min_available = 1 if group.min_available is None else group.min_available
        yield from _config_problems(path, group.scale_config, replicas, min_available, "minAvailable")


def _config_problems(path: str, config: AutoScalingConfig, replicas: int, min_available: int,
                     min_field: str) -> Iterator[Problem]:
    low = replicas if config.min_replicas is None else config.min_replicas
    if config.min_replicas is not None and config.min_replicas < min_available:
        yield Problem(f"{path}.minReplicas", f"must be at least {min_field} ({min_available}), got "
                                             f"{config.min_replicas}: scaling below it would breach availability")
    if config.max_replicas < low:
        yield Problem(f"{path}.maxReplicas", f"must be at least minReplicas ({low}), got {config.max_replicas}")
    elif config.max_replicas < replicas:
        yield Problem(f"{path}.maxReplicas", f"must be at least replicas ({replicas}), got {config.max_replicas}")
    for position, metric in enumerate(config.metrics or []):
        if not isinstance(metric.get("type"), str):
            yield Problem(f"{path}.metrics[{position}].type", "required (Resource, Pods, Object, External or "
                                                              "ContainerResource)")
