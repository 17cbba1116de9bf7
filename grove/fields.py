"""Grove v1alpha1 PodCliqueSet fields grove-temporal does not implement (DESIGN §4.10: never silently ignored).

Every field of Grove's PodCliqueSet API (operator/api/core/v1alpha1/podcliqueset.go and podclique.go) is either
acted on or listed here. A manifest that sets a listed field is still accepted (the field is stored unchanged on
the object), but `grove-temporal validate` warns with the field path, and on the workflow path the PCS gets the
condition `UnsupportedFields=True` and a Warning Event `UnsupportedFields` naming the paths.

Implemented: spec.replicas, spec.updateStrategy and rollingUpdate (grove.rollout); template.cliques[].name/labels/annotations and spec.roleName/podSpec/replicas/
minAvailable/startsAfter/autoScalingConfig; template.cliqueStartupType, priorityClassName (pods and PodGangs),
headlessServiceConfig, terminationDelay; podCliqueScalingGroups[].name/cliqueNames/annotations/replicas/
minAvailable/scaleConfig (and this project's terminationDelay override).
"""

from __future__ import annotations

from collections.abc import Iterator

from grove.models import PodCliqueSet
from grove.problems import Problem

_TOPOLOGY = ("not implemented: topology-aware placement needs Grove's ClusterTopologyBinding to turn domains into "
             "node label keys; PodGangs are created without a topology constraint")
_SHARING = "not implemented: no ResourceClaims are created or shared; pods get only the claims of their podSpec"
NOT_IMPLEMENTED = {
    "spec.template.topologyConstraint": _TOPOLOGY,
    "spec.template.resourceClaimTemplates": _SHARING,
    "spec.template.resourceSharing": _SHARING,
    "spec.template.cliques[].topologyConstraint": _TOPOLOGY,
    "spec.template.cliques[].resourceSharing": _SHARING,
    "spec.template.podCliqueScalingGroups[].topologyConstraint": _TOPOLOGY,
    "spec.template.podCliqueScalingGroups[].resourceSharing": _SHARING,
}
"""Grove field (list items as `[]`) -> what happens instead. docs/limitations.md lists the same."""


def unsupported_fields(pcs: PodCliqueSet) -> list[Problem]:
    """A warning per set field of NOT_IMPLEMENTED, with its exact path."""
    return list(_set_fields(pcs))


def _set(value: object) -> bool:
    return value is not None and value != [] and value != {}


def _set_fields(pcs: PodCliqueSet) -> Iterator[Problem]:
    template = pcs.spec.template
    for key in ("topologyConstraint", "resourceClaimTemplates", "resourceSharing"):
        if _set(_field(template, key)):
            yield _warn(f"spec.template.{key}", f"spec.template.{key}")
    for index, clique in enumerate(template.cliques):
        for key in ("topologyConstraint", "resourceSharing"):
            if _set(_field(clique, key)):
                yield _warn(f"spec.template.cliques[{index}].{key}", f"spec.template.cliques[].{key}")
    for index, group in enumerate(template.pod_clique_scaling_groups):
        for key in ("topologyConstraint", "resourceSharing"):
            if _set(_field(group, key)):
                yield _warn(f"spec.template.podCliqueScalingGroups[{index}].{key}",
                            f"spec.template.podCliqueScalingGroups[].{key}")


def _field(model: object, wire_name: str) -> object:
    """A modelled field by its wire name, or a kept extra field of that name."""
    for name, info in type(model).model_fields.items():  # type: ignore[attr-defined]
        if (info.alias or name) == wire_name:
            return getattr(model, name)
    return (getattr(model, "model_extra", None) or {}).get(wire_name)


def _warn(path: str, key: str) -> Problem:
    return Problem(path, NOT_IMPLEMENTED[key])
