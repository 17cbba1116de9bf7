"""`grove.io/v1alpha1` PodClique: one clique in one PCS replica (or one PCSG replica)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from grove.models.base import Condition, Int, ObjectMeta, WireModel
from grove.models.podcliqueset import PodCliqueSpec
from grove.names import GROVE_API_VERSION, KIND_PODCLIQUE


class PodCliqueStatus(WireModel):
    observed_generation: Int | None = None
    replicas: Int = Field(default=0, description="non-terminated pods")
    ready_replicas: Int = 0
    updated_replicas: Int = 0
    scheduled_replicas: Int = 0
    schedule_gated_replicas: Int = 0
    hpa_pod_selector: str | None = None
    conditions: list[Condition] | None = None
    current_pod_clique_set_generation_hash: str | None = None
    current_pod_template_hash: str | None = None


class PodClique(WireModel):
    api_version: Literal["grove.io/v1alpha1"] = GROVE_API_VERSION
    kind: Literal["PodClique"] = KIND_PODCLIQUE
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PodCliqueSpec
    status: PodCliqueStatus | None = None
