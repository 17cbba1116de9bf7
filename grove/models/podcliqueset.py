"""`grove.io/v1alpha1` PodCliqueSet, with the template types shared by PodClique (field names as in Grove)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field

from grove.models.base import (
    Bool,
    Condition,
    Duration,
    Int,
    ObjectMeta,
    Passthrough,
    StringMap,
    WireModel,
)
from grove.names import GROVE_API_VERSION, KIND_PODCLIQUESET


class PodCliqueSpec(WireModel):
    """Spec of one clique: the pod template plus how many pods and how many must be available."""

    role_name: str | None = Field(default=None, description="role this PodClique assumes")
    pod_spec: Passthrough = Field(default_factory=dict, description="a Kubernetes PodSpec, kept as data")
    replicas: Int = Field(default=1, description="pods in the PodClique (default 1)")
    min_available: Int | None = Field(
        default=None, description="ready pods needed to be available and to gang-schedule (default: replicas)"
    )
    starts_after: list[str] | None = None
    auto_scaling_config: Passthrough | None = None


class RollingUpdateConfiguration(WireModel):
    """Grove's per-component rolling update knobs (on a standalone clique template or a scaling group config)."""

    max_unavailable: Int | None = Field(
        default=None,
        description="pods (standalone PodClique) or whole replicas (scaling group) that may be unavailable at once "
        "during a RollingRecreate update (default 1)",
    )
    progress_deadline: Duration | None = Field(
        default=None, description="how long this component's update may show no progress; unset means no deadline"
    )


class PodCliqueSetUpdateStrategy(WireModel):
    type: str | None = Field(default=None, description="RollingRecreate (default) or OnDelete")


class PodCliqueTemplateSpec(WireModel):
    """An entry of spec.template.cliques[]."""

    name: str = Field(description="clique name, a DNS-1123 label unique within the PodCliqueSet")
    labels: StringMap | None = None
    annotations: StringMap | None = None
    topology_constraint: Passthrough | None = None
    rolling_update: RollingUpdateConfiguration | None = Field(
        default=None, description="standalone cliques only; a scaling group's members follow the group's"
    )
    spec: PodCliqueSpec


class PodCliqueScalingGroupConfig(WireModel):
    """An entry of spec.template.podCliqueScalingGroups[]: cliques that scale together."""

    name: str = Field(description="scaling group name, a DNS-1123 label unique within the PodCliqueSet")
    clique_names: list[str] = Field(description="the cliques of one scaling group replica, in order")
    annotations: StringMap | None = None
    replicas: Int | None = Field(default=None, description="scaling group replicas (default 1)")
    min_available: Int | None = Field(
        default=None, description="replicas in the base PodGang and needed to be available (default 1)"
    )
    termination_delay: Duration | None = Field(
        default=None, description="overrides the PodCliqueSet terminationDelay for this group"
    )
    scale_config: Passthrough | None = None
    topology_constraint: Passthrough | None = None
    rolling_update: RollingUpdateConfiguration | None = None


class HeadlessServiceConfig(WireModel):
    publish_not_ready_addresses: Bool = True


class PodCliqueSetTemplateSpec(WireModel):
    cliques: list[PodCliqueTemplateSpec] = Field(
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}
    )
    clique_startup_type: str | None = None
    priority_class_name: str | None = None
    headless_service_config: HeadlessServiceConfig | None = None
    topology_constraint: Passthrough | None = None
    termination_delay: Duration | None = Field(
        default=None, description="gang termination delay after an availability breach; unset disables it"
    )
    pod_clique_scaling_groups: list[PodCliqueScalingGroupConfig] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )


# Grove's CRD defaults replicas to 0; we default to 1 because a manifest without replicas is meant to run.
DEFAULT_REPLICAS = 1


def wanted_replicas(obj: Mapping[str, Any] | None) -> int | None:
    """spec.replicas of a PodCliqueSet as stored (raw JSON), with the model's default when it is absent.

    None when the value is not a non-negative integer: the spec is invalid and nobody may act on a count read from
    it (a missing or garbled field must never read as 0 and scale every replica in)."""
    spec = (obj or {}).get("spec")
    if not isinstance(spec, Mapping):
        return None
    value = spec.get("replicas", DEFAULT_REPLICAS)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


class PodCliqueSetSpec(WireModel):
    replicas: Int = Field(default=DEFAULT_REPLICAS, description="number of PodCliqueSet replicas (default 1)")
    update_strategy: PodCliqueSetUpdateStrategy | None = None
    template: PodCliqueSetTemplateSpec


class PodCliqueSetStatus(WireModel):
    observed_generation: Int | None = None
    conditions: list[Condition] | None = None
    replicas: Int = 0
    updated_replicas: Int = 0
    available_replicas: Int = 0
    hpa_pod_selector: str | None = None
    pod_gang_statuses: list[Passthrough] | None = None
    current_generation_hash: str | None = None
    update_progress: Passthrough | None = None


class PodCliqueSet(WireModel):
    api_version: Literal["grove.io/v1alpha1"] = GROVE_API_VERSION
    kind: Literal["PodCliqueSet"] = KIND_PODCLIQUESET
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PodCliqueSetSpec
    status: PodCliqueSetStatus | None = None

    @property
    def name(self) -> str:
        return self.metadata.name or ""

    @property
    def namespace(self) -> str:
        return self.metadata.namespace or "default"
