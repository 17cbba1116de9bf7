"""`scheduler.grove.io/v1alpha1` PodGang: what the gang scheduler schedules all-or-nothing."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from grove.models.base import Condition, Int, NamespacedName, ObjectMeta, Passthrough, WireModel
from grove.names import KIND_PODGANG, SCHEDULER_API_VERSION


class PodGangGroup(WireModel):
    """An entry of spec.podgroups[] (Grove's PodGroup; renamed here to keep it apart from KAI's PodGroup)."""

    name: str = Field(description="the PodClique name")
    pod_references: list[NamespacedName] = Field(default_factory=list)
    min_replicas: Int
    topology_constraint: Passthrough | None = None


class PodGangSpec(WireModel):
    # Grove spells this field in lower case on the wire.
    pod_groups: list[PodGangGroup] = Field(
        alias="podgroups",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    topology_constraint: Passthrough | None = None
    topology_constraint_group_configs: list[Passthrough] | None = None
    priority_class_name: str | None = None
    reuse_reservation_ref: NamespacedName | None = None


class PodGangStatus(WireModel):
    phase: str | None = None
    conditions: list[Condition] | None = None
    placement_score: float | None = None


class PodGang(WireModel):
    api_version: Literal["scheduler.grove.io/v1alpha1"] = SCHEDULER_API_VERSION
    kind: Literal["PodGang"] = KIND_PODGANG
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PodGangSpec
    status: PodGangStatus | None = None
