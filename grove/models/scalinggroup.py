"""`grove.io/v1alpha1` PodCliqueScalingGroup: one scaling group in one PCS replica."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from grove.models.base import Condition, Duration, Int, ObjectMeta, WireModel
from grove.names import GROVE_API_VERSION, KIND_PODCLIQUESCALINGGROUP


class PodCliqueScalingGroupSpec(WireModel):
    replicas: Int = 1
    min_available: Int | None = 1
    clique_names: list[str]
    termination_delay: Duration | None = None


class PodCliqueScalingGroupStatus(WireModel):
    observed_generation: Int | None = None
    replicas: Int = 0
    scheduled_replicas: Int = 0
    available_replicas: Int = 0
    updated_replicas: Int = 0
    selector: str | None = None
    conditions: list[Condition] | None = None


class PodCliqueScalingGroup(WireModel):
    api_version: Literal["grove.io/v1alpha1"] = GROVE_API_VERSION
    kind: Literal["PodCliqueScalingGroup"] = KIND_PODCLIQUESCALINGGROUP
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PodCliqueScalingGroupSpec
    status: PodCliqueScalingGroupStatus | None = None
