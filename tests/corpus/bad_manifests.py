"""The bad-input corpus: invalid PodCliqueSets, each wrong in exactly one way, with the field the one message must
name. Used by the unit tests (validator and CLI) and the end-to-end test (apply to the real apiserver, check the
condition, the Event and that nothing was created)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

JSON = dict[str, Any]


def base(name: str = "bad") -> JSON:
    pod = {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}
    return {
        "apiVersion": "grove.io/v1alpha1",
        "kind": "PodCliqueSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "template": {
                "terminationDelay": "30s",
                "cliques": [
                    {"name": "leader", "spec": {"replicas": 1, "minAvailable": 1, "podSpec": pod}},
                    {"name": "worker", "spec": {"replicas": 2, "minAvailable": 2, "podSpec": copy.deepcopy(pod)}},
                    {"name": "router", "spec": {"replicas": 1, "podSpec": copy.deepcopy(pod)}},
                ],
                "podCliqueScalingGroups": [
                    {"name": "prefill", "cliqueNames": ["leader", "worker"], "replicas": 2, "minAvailable": 1},
                ],
            },
        },
    }


@dataclass(frozen=True)
class BadCase:
    id: str
    mutate: Callable[[JSON], None]
    field: str  # the field.path the single problem must name
    schema_rejects: bool = False  # the CRD's structural schema refuses it already at the apiserver

    def manifest(self, name: str = "bad") -> JSON:
        doc = base(name)
        self.mutate(doc)
        return doc


def _clique(doc: JSON, i: int) -> JSON:
    return doc["spec"]["template"]["cliques"][i]  # type: ignore[no-any-return]


def _group(doc: JSON, i: int = 0) -> JSON:
    return doc["spec"]["template"]["podCliqueScalingGroups"][i]  # type: ignore[no-any-return]


def _set(path: Callable[[JSON], JSON], key: str, value: Any) -> Callable[[JSON], None]:
    def mutate(doc: JSON) -> None:
        path(doc)[key] = value

    return mutate


def _two_groups_share(doc: JSON) -> None:
    doc["spec"]["template"]["podCliqueScalingGroups"].append(
        {"name": "decode", "cliqueNames": ["worker"], "replicas": 1, "minAvailable": 1})


def _pcsg_delay_without_pcs_delay(doc: JSON) -> None:
    del doc["spec"]["template"]["terminationDelay"]
    _group(doc)["terminationDelay"] = "10s"


def _duplicate_clique(doc: JSON) -> None:
    _clique(doc, 2)["name"] = "leader"


T = "spec.template"
CASES: list[BadCase] = [
    BadCase("clique-name-uppercase", _set(lambda d: _clique(d, 2), "name", "Router"), f"{T}.cliques[2].name"),
    BadCase("clique-name-underscore", _set(lambda d: _clique(d, 2), "name", "my_router"), f"{T}.cliques[2].name"),
    BadCase("clique-name-non-ascii", _set(lambda d: _clique(d, 2), "name", "routér"), f"{T}.cliques[2].name"),
    BadCase("clique-name-oversized", _set(lambda d: _clique(d, 2), "name", "r" * 300), f"{T}.cliques[2].name"),
    BadCase("clique-name-duplicate", _duplicate_clique, f"{T}.cliques[2].name", schema_rejects=True),
    BadCase("clique-replicas-zero", _set(lambda d: _clique(d, 2)["spec"], "replicas", 0),
            f"{T}.cliques[2].spec.replicas"),
    BadCase("clique-replicas-negative", _set(lambda d: _clique(d, 2)["spec"], "replicas", -3),
            f"{T}.cliques[2].spec.replicas"),
    BadCase("clique-replicas-not-a-number", _set(lambda d: _clique(d, 2)["spec"], "replicas", "two"),
            f"{T}.cliques[2].spec.replicas", schema_rejects=True),
    BadCase("clique-minavailable-zero", _set(lambda d: _clique(d, 1)["spec"], "minAvailable", 0),
            f"{T}.cliques[1].spec.minAvailable"),
    BadCase("clique-minavailable-above-replicas", _set(lambda d: _clique(d, 1)["spec"], "minAvailable", 3),
            f"{T}.cliques[1].spec.minAvailable"),
    BadCase("pcsg-unknown-clique", _set(_group, "cliqueNames", ["leader", "ghost"]),
            f"{T}.podCliqueScalingGroups[0].cliqueNames[1]"),
    BadCase("pcsg-clique-in-two-groups", _two_groups_share, f"{T}.podCliqueScalingGroups[1].cliqueNames[0]"),
    BadCase("pcsg-no-cliques", _set(_group, "cliqueNames", []), f"{T}.podCliqueScalingGroups[0].cliqueNames"),
    BadCase("pcsg-name-invalid", _set(_group, "name", "Prefill!"), f"{T}.podCliqueScalingGroups[0].name"),
    BadCase("pcsg-replicas-zero", _set(_group, "replicas", 0), f"{T}.podCliqueScalingGroups[0].replicas"),
    BadCase("pcsg-minavailable-zero", _set(_group, "minAvailable", 0),
            f"{T}.podCliqueScalingGroups[0].minAvailable"),
    BadCase("pcsg-minavailable-above-replicas", _set(_group, "minAvailable", 3),
            f"{T}.podCliqueScalingGroups[0].minAvailable"),
    BadCase("pcsg-delay-zero", _set(_group, "terminationDelay", "0s"),
            f"{T}.podCliqueScalingGroups[0].terminationDelay"),
    BadCase("pcsg-delay-without-pcs-delay", _pcsg_delay_without_pcs_delay,
            f"{T}.podCliqueScalingGroups[0].terminationDelay"),
    BadCase("delay-zero", _set(lambda d: d["spec"]["template"], "terminationDelay", "0s"), f"{T}.terminationDelay"),
    BadCase("delay-negative", _set(lambda d: d["spec"]["template"], "terminationDelay", "-30s"),
            f"{T}.terminationDelay"),
    BadCase("delay-not-a-duration", _set(lambda d: d["spec"]["template"], "terminationDelay", "soon"),
            f"{T}.terminationDelay", schema_rejects=True),
    BadCase("no-cliques", _set(lambda d: d["spec"], "template", {"cliques": []}), f"{T}.cliques"),
    BadCase("pcs-replicas-negative", _set(lambda d: d["spec"], "replicas", -1), "spec.replicas",
            schema_rejects=True),  # the scale subresource requires a non-negative spec.replicas
    BadCase("release-after-annotation", _set(lambda d: d["metadata"], "annotations",
                                             {"grove-temporal.io/scaled-release-after": "Soon"}),
            "metadata.annotations[grove-temporal.io/scaled-release-after]"),
    BadCase("pcs-name-non-ascii", _set(lambda d: d["metadata"], "name", "prefíll"), "metadata.name",
            schema_rejects=True),  # the apiserver's own name validation
    BadCase("pcs-name-oversized", _set(lambda d: d["metadata"], "name", "p" * 70), "metadata.name"),
    BadCase("generated-name-too-long", _set(lambda d: _clique(d, 2), "name", "r" * 60),
            f"{T}.cliques[2].name"),
]
