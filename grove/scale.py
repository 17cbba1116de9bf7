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

Above the name limit: clamped. A count that would generate a name over 63 characters is lowered to the largest count
whose names fit, written back and reported (Event `ScaleClamped`), so nothing is ever half-created. The limit is the
DNS label one: a pod's name is its hostname, and a PodClique's name is the value of its pods' `grove.io/podclique`
label (both 63 characters; the 253-character object-name limit is never the binding one). PCSG replica j creates
PodCliques `<pcsg>-j-<clique>` and pods `<pcsg>-j-<clique>-<k>` (k below the clique's template count); pod k of a
PodClique is `<podclique>-k`. Validation at creation already checks the template's counts (grove/validation.py), so
the limit only bites on a later scale write (an HPA's maxReplicas or `kubectl scale`).
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

    def scaling_group(self, name: str, template: int, min_available: int, most: int | None = None) -> int:
        return _kept(self.scaling_groups.get(name), template, min_available, most)

    def pod_clique(self, name: str, template: int, min_available: int, most: int | None = None) -> int:
        return _kept(self.pod_cliques.get(name), template, min_available, most)


def _kept(observed: int | None, template: int, min_available: int, most: int | None = None) -> int:
    """The count to plan: the template seeds; a stored count is kept, raised to minAvailable and lowered to `most`
    (the largest count whose names fit). minAvailable wins over `most`: validation keeps the template's counts within
    the name limit and minAvailable is at most the template's count."""
    if observed is None:
        return template
    if most is not None:
        observed = min(observed, most)
    return max(observed, min_available)


# --- the name limit ----------------------------------------------------------------------------------------------
def most_indices(prefix: str, suffix: str = "", limit: int = names.MAX_NAME_LENGTH) -> int:
    """How many indices 0, 1, 2, ... fit into `<prefix>-<index><suffix>` within `limit` characters (0 if none)."""
    digits = limit - len(prefix) - 1 - len(suffix)
    return 0 if digits <= 0 else 10 ** digits


def most_pods(pclq: str) -> int:
    """The largest replica count of PodClique `pclq` whose pod names (= hostnames) fit 63 characters."""
    return most_indices(pclq)


def most_scaling_group_replicas(pcsg: str, member_pods: Mapping[str, int]) -> int:
    """The largest replica count of PCSG `pcsg` whose new PodCliques and pods fit 63 characters (`member_pods`:
    clique name -> the template pod count a new replica's PodClique is created with)."""
    suffixes = [f"-{clique}-{max(pods, 1) - 1}" for clique, pods in member_pods.items()]
    return min((most_indices(pcsg, suffix) for suffix in suffixes), default=most_indices(pcsg))


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
    """Sentences for every object whose stored count was raised to its minAvailable or lowered to the name limit
    (`planned`: name -> count in the plan)."""
    out = []
    for kind, stored in (("PodCliqueScalingGroup", counts.scaling_groups), ("PodClique", counts.pod_cliques)):
        for name, value in sorted(stored.items()):
            want = planned.get(name)
            if want is not None and value < want:
                out.append(f"{kind} {name}: spec.replicas {value} is below its minAvailable; kept at {want}")
            elif want is not None and value > want:
                out.append(f"{kind} {name}: spec.replicas {value} would generate names over "
                           f"{names.MAX_NAME_LENGTH} characters (index {want} and up: {name}-{want}...); "
                           f"kept at {want}")
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
