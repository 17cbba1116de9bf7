"""Replica counts after creation (DESIGN §4.10): the objects own them, the PCS template only seeds them.

A PodCliqueScalingGroup's and a PodClique's `spec.replicas` are written by whoever scales them — an HPA or
`kubectl scale` through the scale subresource — and kept, as Grove keeps them: the template's `replicas` is used
when the object is created (also when a gang termination recreates a PodClique), and a later template change
does not reach objects that exist. Grove sets PCSG replicas only when it creates the PCSG
(`podcliquescalinggroup.go`, buildResource) and keeps a PodClique's current replicas on every update
(`podclique.go`, buildResource).

Below minAvailable: clamped. Grove accepts such a write (nothing validates the PCSG or PodClique object), but its
base PodGang keeps PCSG replicas 0 .. minAvailable-1 whatever spec.replicas says, while its PCSG controller deletes
their PodCliques, leaving a base gang that can never be scheduled. Here the count is raised to minAvailable, written
back to the object and reported (Event `ScaleClamped`), so the base gang stays whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from grove import names


class ObservedCounts(BaseModel):
    """spec.replicas of the live (non-terminating) PCSG and PodClique objects of one replica, by object name."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    scaling_groups: dict[str, int] = Field(default_factory=dict)
    pod_cliques: dict[str, int] = Field(default_factory=dict)

    def scaling_group(self, name: str, template: int, min_available: int) -> int:
        return _kept(self.scaling_groups.get(name), template, min_available)

    def pod_clique(self, name: str, template: int, min_available: int) -> int:
        return _kept(self.pod_cliques.get(name), template, min_available)


def _kept(observed: int | None, template: int, min_available: int) -> int:
    if observed is None:
        return template
    return max(observed, min_available)


def observed_counts(scaling_groups: Iterable[Mapping[str, Any]], pod_cliques: Iterable[Mapping[str, Any]]) -> ObservedCounts:
    """From objects as read (JSON): terminating objects and unreadable counts are left out (the template seeds)."""
    return ObservedCounts(scaling_groups=_counts(scaling_groups), pod_cliques=_counts(pod_cliques))


def _counts(objects: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    found: dict[str, int] = {}
    for obj in objects:
        meta = obj.get("metadata") or {}
        value = (obj.get("spec") or {}).get("replicas")
        if meta.get("deletionTimestamp") or isinstance(value, bool) or not isinstance(value, int):
            continue
        found[str(meta.get("name", ""))] = value
    return found


def clamped(counts: ObservedCounts, planned: Mapping[str, int]) -> list[str]:
    """Sentences for every object whose stored count was raised to its minAvailable (`planned`: name -> count in
    the plan)."""
    out = []
    for kind, stored in (("PodCliqueScalingGroup", counts.scaling_groups), ("PodClique", counts.pod_cliques)):
        for name, value in sorted(stored.items()):
            want = planned.get(name)
            if want is not None and value < want:
                out.append(f"{kind} {name}: spec.replicas {value} is below its minAvailable; kept at {want}")
    return out


# --- selectors (the scale subresource's selectorpath: what an HPA reads its pod metrics from) --------------------
def podclique_selector(pcs: str, pclq: str) -> str:
    """PodClique status.hpaPodSelector: exactly its pods."""
    return f"{names.pcs_selector(pcs)},{names.LABEL_PODCLIQUE}={pclq}"


def scaling_group_selector(pcs: str, pcsg: str) -> str:
    """PodCliqueScalingGroup status.selector: the pods of all its replicas."""
    return f"{names.pcs_selector(pcs)},{names.LABEL_PCSG}={pcsg}"


def podcliqueset_selector(pcs: str) -> str:
    """PodCliqueSet status.hpaPodSelector: every pod of every replica."""
    return names.pcs_selector(pcs)
