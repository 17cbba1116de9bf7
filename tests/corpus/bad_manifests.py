"""The bad-input corpus: invalid PodCliqueSets, each wrong in exactly one way, with the field the one message must
name and who refuses it first. Used by the unit tests (validator and CLI), the integration test (create on the real
apiserver: refused at the door with the field path, unless only the workflow path can tell) and the end-to-end test
(the workflow path: condition, Event, nothing created)."""

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
    refused_by: str = "rule"  # "schema": the apiserver's own checks and the structural schema (types, patterns,
    # map-list keys, object names); "rule": the admission rules of grove/rules.py (CEL, bounds); "workflow": stored,
    # then refused by the workflow (condition + Event): a rule of grove.rules.WORKFLOW_ONLY
    api_field: str | None = None  # the path the apiserver names when it is a prefix of `field` (CEL has no indices)

    @property
    def schema_rejects(self) -> bool:
        return self.refused_by == "schema"

    @property
    def admitted(self) -> bool:
        return self.refused_by == "workflow"

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


def _drop(path: Callable[[JSON], JSON], key: str) -> Callable[[JSON], None]:
    def mutate(doc: JSON) -> None:
        del path(doc)[key]

    return mutate


def _many_cliques(doc: JSON) -> None:
    pod = {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}
    doc["spec"]["template"]["cliques"].extend(
        {"name": f"extra-{i}", "spec": {"replicas": 1, "podSpec": copy.deepcopy(pod)}} for i in range(30))


def _two_groups_named_alike(doc: JSON) -> None:
    doc["spec"]["template"]["podCliqueScalingGroups"].append(
        {"name": "prefill", "cliqueNames": ["router"], "replicas": 1, "minAvailable": 1})


def _duplicate_clique(doc: JSON) -> None:
    _clique(doc, 2)["name"] = "leader"


T = "spec.template"
CASES: list[BadCase] = [
    BadCase("update-strategy-unknown", lambda d: d["spec"].update(updateStrategy={"type": "Rolling"}),
            "spec.updateStrategy.type"),
    BadCase("rolling-update-max-unavailable-zero", _set(lambda d: _clique(d, 2), "rollingUpdate", {"maxUnavailable": 0}),
            f"{T}.cliques[2].rollingUpdate.maxUnavailable"),
    BadCase("rolling-update-progress-deadline-zero",
            _set(lambda d: _group(d), "rollingUpdate", {"progressDeadline": "0s"}),
            f"{T}.podCliqueScalingGroups[0].rollingUpdate.progressDeadline"),
    BadCase("clique-name-uppercase", _set(lambda d: _clique(d, 2), "name", "Router"), f"{T}.cliques[2].name"),
    BadCase("clique-name-underscore", _set(lambda d: _clique(d, 2), "name", "my_router"), f"{T}.cliques[2].name"),
    BadCase("clique-name-non-ascii", _set(lambda d: _clique(d, 2), "name", "routér"), f"{T}.cliques[2].name"),
    BadCase("clique-name-oversized", _set(lambda d: _clique(d, 2), "name", "r" * 300), f"{T}.cliques[2].name"),
    BadCase("clique-name-duplicate", _duplicate_clique, f"{T}.cliques[2].name", refused_by="schema"),
    BadCase("clique-replicas-zero", _set(lambda d: _clique(d, 2)["spec"], "replicas", 0),
            f"{T}.cliques[2].spec.replicas"),
    BadCase("clique-replicas-negative", _set(lambda d: _clique(d, 2)["spec"], "replicas", -3),
            f"{T}.cliques[2].spec.replicas"),
    BadCase("clique-replicas-not-a-number", _set(lambda d: _clique(d, 2)["spec"], "replicas", "two"),
            f"{T}.cliques[2].spec.replicas", refused_by="schema"),
    BadCase("clique-minavailable-zero", _set(lambda d: _clique(d, 1)["spec"], "minAvailable", 0),
            f"{T}.cliques[1].spec.minAvailable"),
    BadCase("clique-minavailable-above-replicas", _set(lambda d: _clique(d, 1)["spec"], "minAvailable", 3),
            f"{T}.cliques[1].spec.minAvailable"),
    BadCase("pcsg-unknown-clique", _set(_group, "cliqueNames", ["leader", "ghost"]),
            f"{T}.podCliqueScalingGroups[0].cliqueNames[1]", api_field=f"{T}.podCliqueScalingGroups"),
    BadCase("pcsg-clique-in-two-groups", _two_groups_share, f"{T}.podCliqueScalingGroups[1].cliqueNames[0]",
            api_field=f"{T}.podCliqueScalingGroups"),
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
            f"{T}.podCliqueScalingGroups[0].terminationDelay", api_field=f"{T}.podCliqueScalingGroups"),
    BadCase("delay-zero", _set(lambda d: d["spec"]["template"], "terminationDelay", "0s"), f"{T}.terminationDelay"),
    BadCase("delay-negative", _set(lambda d: d["spec"]["template"], "terminationDelay", "-30s"),
            f"{T}.terminationDelay"),
    BadCase("delay-not-a-duration", _set(lambda d: d["spec"]["template"], "terminationDelay", "soon"),
            f"{T}.terminationDelay", refused_by="schema"),
    BadCase("no-cliques", _set(lambda d: d["spec"], "template", {"cliques": []}), f"{T}.cliques"),
    BadCase("pcs-replicas-negative", _set(lambda d: d["spec"], "replicas", -1), "spec.replicas",
            refused_by="schema"),  # the scale subresource requires a non-negative spec.replicas
    BadCase("release-after-annotation", _set(lambda d: d["metadata"], "annotations",
                                             {"grove-temporal.io/scaled-release-after": "Soon"}),
            "metadata.annotations[grove-temporal.io/scaled-release-after]", refused_by="workflow"),
    BadCase("pcs-name-non-ascii", _set(lambda d: d["metadata"], "name", "prefíll"), "metadata.name",
            refused_by="schema"),  # the apiserver's own name validation
    BadCase("pcs-name-oversized", _set(lambda d: d["metadata"], "name", "p" * 70), "metadata.name"),
    BadCase("generated-name-too-long", _set(lambda d: _clique(d, 2), "name", "r" * 60),
            f"{T}.cliques[2].name", refused_by="workflow"),
    # --- added with the admission rules
    BadCase("pcs-name-starts-with-digit", _set(lambda d: d["metadata"], "name", "1bad"), "metadata.name",
            refused_by="workflow"),  # a regex over metadata.name is beyond CEL's cost budget
    BadCase("pcs-name-with-a-dot", _set(lambda d: d["metadata"], "name", "bad.one"), "metadata.name",
            refused_by="workflow"),
    BadCase("pcs-name-uppercase", _set(lambda d: d["metadata"], "name", "Bad"), "metadata.name",
            refused_by="schema"),
    BadCase("pcs-replicas-not-a-number", _set(lambda d: d["spec"], "replicas", "3"), "spec.replicas",
            refused_by="schema"),
    BadCase("no-template", _drop(lambda d: d["spec"], "template"), "spec.template", refused_by="schema"),
    BadCase("clique-spec-missing", _drop(lambda d: _clique(d, 2), "spec"), f"{T}.cliques[2].spec",
            refused_by="schema"),
    BadCase("clique-name-empty", _set(lambda d: _clique(d, 2), "name", ""), f"{T}.cliques[2].name"),
    BadCase("clique-minavailable-negative", _set(lambda d: _clique(d, 1)["spec"], "minAvailable", -1),
            f"{T}.cliques[1].spec.minAvailable"),
    BadCase("clique-minavailable-not-a-number", _set(lambda d: _clique(d, 1)["spec"], "minAvailable", "all"),
            f"{T}.cliques[1].spec.minAvailable", refused_by="schema"),
    BadCase("too-many-cliques", _many_cliques, f"{T}.cliques"),
    BadCase("pcsg-clique-listed-twice", _set(_group, "cliqueNames", ["leader", "leader"]),
            f"{T}.podCliqueScalingGroups[0].cliqueNames"),
    BadCase("pcsg-clique-name-oversized", _set(_group, "cliqueNames", ["leader", "w" * 70]),
            f"{T}.podCliqueScalingGroups[0].cliqueNames[1]"),
    BadCase("pcsg-cliquenames-not-a-list", _set(_group, "cliqueNames", "leader"),
            f"{T}.podCliqueScalingGroups[0].cliqueNames", refused_by="schema"),
    BadCase("pcsg-name-oversized", _set(_group, "name", "p" * 70), f"{T}.podCliqueScalingGroups[0].name"),
    BadCase("pcsg-name-duplicate", _two_groups_named_alike, f"{T}.podCliqueScalingGroups[1].name",
            refused_by="schema"),
    BadCase("pcsg-replicas-negative", _set(_group, "replicas", -2), f"{T}.podCliqueScalingGroups[0].replicas"),
    BadCase("pcsg-minavailable-negative", _set(_group, "minAvailable", -1),
            f"{T}.podCliqueScalingGroups[0].minAvailable"),
    BadCase("pcsg-delay-negative", _set(_group, "terminationDelay", "-5m"),
            f"{T}.podCliqueScalingGroups[0].terminationDelay"),
    BadCase("pcsg-delay-not-a-duration", _set(_group, "terminationDelay", "later"),
            f"{T}.podCliqueScalingGroups[0].terminationDelay", refused_by="schema"),
    BadCase("delay-finer-than-a-microsecond", _set(lambda d: d["spec"]["template"], "terminationDelay", "1ns"),
            f"{T}.terminationDelay", refused_by="workflow"),
    BadCase("clique-named-like-a-scaling-group-replica", _set(lambda d: _clique(d, 2), "name", "prefill-1"),
            f"{T}.podCliqueScalingGroups[0].name", refused_by="workflow"),
]
