"""`scheduling.run.ai/v2alpha2` PodGroup (KAI scheduler) with hierarchical subGroups (seeds 000 and 001).

minMember counts pods and belongs to leaves; minSubGroup counts direct children and belongs to inner nodes. The
model accepts any combination so that validation can explain what is wrong; see grove.validation.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from grove.models.base import Int, ObjectMeta, Passthrough, WireModel
from grove.names import KAI_API_VERSION, KIND_KAI_PODGROUP


class SubGroup(WireModel):
    name: str
    parent: str | None = None
    min_member: Int | None = Field(default=None, description="pods; leaves only")
    min_sub_group: Int | None = Field(
        default=None, description="direct children; inner nodes only; unset = all"
    )
    topology_constraint: Passthrough | None = None


class KaiPodGroupSpec(WireModel):
    min_member: Int | None = None
    min_sub_group: Int | None = None
    queue: str | None = None
    priority_class_name: str | None = None
    preemptibility: str | None = None
    topology_constraint: Passthrough | None = None
    sub_groups: list[SubGroup] | None = None


class KaiPodGroup(WireModel):
    api_version: Literal["scheduling.run.ai/v2alpha2"] = KAI_API_VERSION
    kind: Literal["PodGroup"] = KIND_KAI_PODGROUP
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: KaiPodGroupSpec
    status: Passthrough | None = None
