"""Pydantic models of the Grove and KAI resources, with Grove's exact wire field names."""

from grove.models.base import (
    Condition,
    Duration,
    NamespacedName,
    ObjectMeta,
    OwnerReference,
    WireModel,
)
from grove.models.kai import KaiPodGroup, KaiPodGroupSpec, SubGroup
from grove.models.podclique import PodClique, PodCliqueStatus
from grove.models.podcliqueset import (
    HeadlessServiceConfig,
    PodCliqueScalingGroupConfig,
    PodCliqueSet,
    PodCliqueSetSpec,
    PodCliqueSetStatus,
    PodCliqueSetTemplateSpec,
    PodCliqueSetUpdateStrategy,
    PodCliqueSpec,
    PodCliqueTemplateSpec,
    RollingUpdateConfiguration,
)
from grove.models.podgang import PodGang, PodGangGroup, PodGangSpec, PodGangStatus
from grove.models.scalinggroup import (
    PodCliqueScalingGroup,
    PodCliqueScalingGroupSpec,
    PodCliqueScalingGroupStatus,
)

__all__ = [
    "Condition",
    "Duration",
    "HeadlessServiceConfig",
    "KaiPodGroup",
    "KaiPodGroupSpec",
    "NamespacedName",
    "ObjectMeta",
    "OwnerReference",
    "PodClique",
    "PodCliqueScalingGroup",
    "PodCliqueScalingGroupConfig",
    "PodCliqueScalingGroupSpec",
    "PodCliqueScalingGroupStatus",
    "PodCliqueSet",
    "PodCliqueSetSpec",
    "PodCliqueSetStatus",
    "PodCliqueSetTemplateSpec",
    "PodCliqueSetUpdateStrategy",
    "PodCliqueSpec",
    "PodCliqueStatus",
    "PodCliqueTemplateSpec",
    "PodGang",
    "PodGangGroup",
    "PodGangSpec",
    "PodGangStatus",
    "RollingUpdateConfiguration",
    "SubGroup",
    "WireModel",
]
