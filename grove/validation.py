"""Validation of PodCliqueSets (DESIGN §4.1) and KAI PodGroup trees (seed 001), with defaults.

Every function here takes whatever YAML produced and never raises on it: malformed input comes back as
`field.path: message` problems like everything else. A PCS with any problem must change nothing in the cluster.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import ValidationError

from grove import names, rules
from grove.autoscaling import autoscaling_problems
from grove.fields import unsupported_fields
from grove.models import KaiPodGroup, PodCliqueSet
from grove.podgroup_rules import podgroup_tree_problems
from grove.problems import ROOT, Problem, from_validation_error, unknown_fields
from grove.rollout import rollout_problems
from grove.startup import startup_problems, startup_warnings

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

__all__ = [
    "Problem",
    "check_document",
    "defaulted",
    "parse_pcs",
    "parse_podgroup",
    "validate_document",
    "validate_pcs",
    "validate_podgroup",
    "warnings_for",
]


# --- Parsing -----------------------------------------------------------------------------------------------
def parse_pcs(data: Any) -> tuple[PodCliqueSet | None, list[Problem]]:
    """Parse a PodCliqueSet manifest; on failure the problems say which fields are malformed."""
    if isinstance(data, PodCliqueSet):
        return data, []
    if not isinstance(data, Mapping):
        return None, [Problem(ROOT, f"must be a mapping (a Kubernetes object), got {type(data).__name__}")]
    try:
        return PodCliqueSet.model_validate(data), []
    except ValidationError as error:
        return None, from_validation_error(error)


def parse_podgroup(data: Any) -> tuple[KaiPodGroup | None, list[Problem]]:
    if isinstance(data, KaiPodGroup):
        return data, []
    if not isinstance(data, Mapping):
        return None, [Problem(ROOT, f"must be a mapping (a Kubernetes object), got {type(data).__name__}")]
    try:
        return KaiPodGroup.model_validate(data), []
    except ValidationError as error:
        return None, from_validation_error(error)


# --- Entry points ------------------------------------------------------------------------------------------
def validate_pcs(data: Any) -> list[Problem]:
    """Every problem of a PodCliqueSet (a manifest dict or a parsed model); empty when it is valid."""
    pcs, problems = parse_pcs(data)
    if pcs is None:
        return sorted(problems + _problems_beside(data, problems), key=_path_order)
    return list(_pcs_problems(pcs))


# What validation reads of a PodCliqueSet besides its spec. Anything else (uid, resourceVersion, status, managed
# fields) changes without changing the verdict.
_VALIDATED_METADATA = ("name", "namespace", "labels", "annotations")


def validate_pcs_remembered(data: Mapping[str, Any]) -> list[Problem]:
    """validate_pcs of a manifest, remembered by what validation reads (apiVersion, kind, spec, and metadata name,
    namespace, labels, annotations). A worker validates the same PodCliqueSet on every round of every replica and in
    every rollout observation, and its rules cost milliseconds each time: 9% of the worker's CPU in B3 (issue 17).
    Validation is a pure function of those fields, so a verdict is never stale."""
    meta = data.get("metadata") or {}
    key = json.dumps({"apiVersion": data.get("apiVersion"), "kind": data.get("kind"), "spec": data.get("spec"),
                      "metadata": {k: meta.get(k) for k in _VALIDATED_METADATA if meta.get(k) is not None}},
                     sort_keys=True, separators=(",", ":"), default=str)
    return list(_validated(key))


@functools.lru_cache(maxsize=1024)
def _validated(key: str) -> tuple[Problem, ...]:
    return tuple(validate_pcs(json.loads(key)))


def _problems_beside(data: Any, malformed: list[Problem]) -> list[Problem]:
    """The rule problems of the rest of a manifest some fields of which are malformed: those fields are left out
    (their defaults apply) and the rest is checked, so that one bad duration does not hide every other problem.
    Nothing when the manifest does not parse even so (a required field is missing or malformed)."""
    if not isinstance(data, Mapping):
        return []
    pruned = copy.deepcopy(dict(data))
    for problem in malformed:
        if not _remove(pruned, problem.path):
            return []
    pcs, still = parse_pcs(pruned)
    if pcs is None or still:
        return []
    bad = frozenset(problem.path for problem in malformed)
    return [p for p in _pcs_problems(pcs, unknown=bad) if p.path not in bad]


def _remove(data: dict[str, Any], path: str) -> bool:
    parts: list[str | int] = [
        int(part) if part.isdigit() else part for part in re.split(r"\.|\[(\d+)\]", path) if part
    ]
    node: Any = data
    for part in parts[:-1]:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return False
    last = parts[-1] if parts else None
    if isinstance(node, dict) and last in node:
        del node[last]
        return True
    return False


def validate_podgroup(data: Any) -> list[Problem]:
    """Every problem of a KAI PodGroup, seed 001 rules; empty when it is valid."""
    podgroup, problems = parse_podgroup(data)
    if podgroup is None:
        return problems
    return podgroup_tree_problems(podgroup)


def validate_document(data: Any) -> list[Problem]:
    """Dispatch on kind: PodCliqueSet or KAI PodGroup."""
    return check_document(data)[0]


def check_document(data: Any) -> tuple[list[Problem], list[Problem]]:
    """(problems, warnings) of one YAML document. Warnings (unknown fields) never make a document invalid."""
    if not isinstance(data, Mapping):
        return [Problem(ROOT, f"must be a mapping (a Kubernetes object), got {type(data).__name__}")], []
    kind = data.get("kind")
    if kind == names.KIND_PODCLIQUESET:
        pcs, problems = parse_pcs(data)
        if pcs is None:
            return validate_pcs(data), []
        return list(_pcs_problems(pcs)), warnings_for(pcs)
    if kind == names.KIND_KAI_PODGROUP:
        podgroup, problems = parse_podgroup(data)
        if podgroup is None:
            return problems, []
        return podgroup_tree_problems(podgroup), warnings_for(podgroup)
    expected = f"{names.KIND_PODCLIQUESET} ({names.GROVE_API_VERSION}) or {names.KIND_KAI_PODGROUP} ({names.KAI_API_VERSION})"
    if kind is None:
        return [Problem("kind", f"required; expected {expected}")], []
    return [Problem("kind", f"unsupported kind {kind!r}; expected {expected}")], []


def warnings_for(model: PodCliqueSet | KaiPodGroup) -> list[Problem]:
    """Unknown fields in spec (metadata and status are the apiserver's business); for a PodCliqueSet also the Grove
    fields grove-temporal does not implement and startsAfter without Explicit startup (DESIGN §4.10)."""
    found = unknown_fields(model.spec, ["spec"])
    if isinstance(model, PodCliqueSet):
        found += unsupported_fields(model) + list(startup_warnings(model))
    return found


# --- Defaults ----------------------------------------------------------------------------------------------
def defaulted(pcs: PodCliqueSet) -> PodCliqueSet:
    """A copy with Grove's defaults filled in: clique minAvailable = replicas, PCSG replicas and minAvailable = 1,
    namespace = default. Assumes nothing about validity; callers validate first."""
    result = pcs.model_copy(deep=True)
    if result.metadata.namespace is None:
        result.metadata.namespace = names.DEFAULT_NAMESPACE
    for clique in result.spec.template.cliques:
        if clique.spec.min_available is None:
            clique.spec.min_available = clique.spec.replicas
    for group in result.spec.template.pod_clique_scaling_groups:
        if group.replicas is None:
            group.replicas = rules.default_of("PodCliqueScalingGroupConfig", "replicas")
        if group.min_available is None:
            group.min_available = rules.default_of("PodCliqueScalingGroupConfig", "minAvailable")
    return result


# --- PodCliqueSet rules ------------------------------------------------------------------------------------
def _pcs_problems(pcs: PodCliqueSet, unknown: frozenset[str] = frozenset()) -> list[Problem]:
    """The shared rules of grove/rules.py (also the CRD's admission rules), then the rules only Python can check
    (grove.rules.WORKFLOW_ONLY), sorted by field path. `unknown`: malformed fields left out (see below)."""
    found = [*_name_required(pcs), *_annotation_problems(pcs), *rules.problems(pcs, unknown)]
    found.extend(_duplicate_problems(pcs))
    found.extend(_day2_problems(pcs))
    found.extend(rollout_problems(pcs))  # updateStrategy and rollingUpdate (grove/rollout.py; not yet CEL)
    if not unknown:  # generated names depend on counts that may be among the unknown
        found.extend(_generated_name_problems(pcs))
    return sorted(dict.fromkeys(found), key=_path_order)


def _path_order(problem: Problem) -> list[tuple[int, int | str]]:
    """Document order: list indices compare as numbers (cliques[2] before cliques[10])."""
    return [(1, int(part)) if part.isdigit() else (0, part) for part in re.split(r"\[(\d+)\]", problem.path)]


def _label_problem(path: str, value: str) -> Problem | None:
    if not value:
        return Problem(path, "required")
    if len(value) > names.MAX_NAME_LENGTH:
        return Problem(path, f"must be at most {names.MAX_NAME_LENGTH} characters, got {len(value)}")
    if not _DNS1123_LABEL.match(value):
        return Problem(path, f"{value!r} is not a DNS-1123 label")
    return None


def _name_required(pcs: PodCliqueSet) -> Iterator[Problem]:
    # The apiserver never stores an object without a name; a file may lack one.
    if not pcs.metadata.name:
        yield Problem("metadata.name", "required")


def _annotation_problems(pcs: PodCliqueSet) -> Iterator[Problem]:
    annotations = pcs.metadata.annotations or {}
    key = names.ANNOTATION_SCALED_RELEASE_AFTER
    if key in annotations and annotations[key] not in names.RELEASE_AFTER_VALUES:
        allowed = " or ".join(names.RELEASE_AFTER_VALUES)
        yield Problem(f"metadata.annotations[{key}]", f"must be {allowed}, got {annotations[key]!r}")
    key = names.ANNOTATION_SCHEDULER_BACKEND  # DESIGN §4b, grove.scheduling
    if key in annotations and annotations[key] not in names.BACKEND_VALUES:
        yield Problem(f"metadata.annotations[{key}]",
                      f"must be {', '.join(names.BACKEND_VALUES)}, got {annotations[key]!r}")


def _duplicate_problems(pcs: PodCliqueSet) -> Iterator[Problem]:
    """Names must be unique within cliques and within scaling groups (the CRD's map-list keys refuse these too)."""
    template = pcs.spec.template
    yield from _duplicates("cliques", "clique", [c.name for c in template.cliques])
    yield from _duplicates(
        "podCliqueScalingGroups", "scaling group", [g.name for g in template.pod_clique_scaling_groups]
    )


def _duplicates(field: str, what: str, item_names: list[str]) -> Iterator[Problem]:
    seen: dict[str, int] = {}
    for index, name in enumerate(item_names):
        if name in seen:
            yield Problem(
                f"spec.template.{field}[{index}].name",
                f"duplicate {what} name {name!r} (also {field}[{seen[name]}])",
            )
        else:
            seen[name] = index


# --- Generated names ---------------------------------------------------------------------------------------
def _generated_name_problems(pcs: PodCliqueSet) -> Iterator[Problem]:
    """Every generated object name must fit 63 characters for the highest replica index, and must not collide.

    Only checked when the names they are made of are themselves valid, so one bad name yields one problem.
    """
    pcs_name = pcs.metadata.name or ""
    if _label_problem("", pcs_name) is not None:
        return
    last_replica = max(pcs.spec.replicas, 1) - 1
    prefix = names.replica_prefix(pcs_name, last_replica)
    if len(prefix) > names.MAX_NAME_LENGTH:
        yield _too_long(
            "metadata.name", prefix, f"base PodGang and headless Service of replica {last_replica}"
        )
        return
    cliques = {c.name: c for c in pcs.spec.template.cliques if _label_problem("", c.name) is None}
    grouped = {name for g in pcs.spec.template.pod_clique_scaling_groups for name in g.clique_names}
    for index, clique in enumerate(pcs.spec.template.cliques):
        if clique.name in cliques and clique.name not in grouped and clique.spec.replicas >= 1:
            pclq = names.pclq_name(pcs_name, last_replica, clique.name)
            hostname = names.pod_name(pclq, clique.spec.replicas - 1)
            if len(hostname) > names.MAX_NAME_LENGTH:
                yield _too_long(f"spec.template.cliques[{index}].name", hostname, "pod hostname")
    for index, group in enumerate(pcs.spec.template.pod_clique_scaling_groups):
        if _label_problem("", group.name) is not None:
            continue
        replicas = max(1 if group.replicas is None else group.replicas, 1)
        pcsg = names.pcsg_name(pcs_name, last_replica, group.name)
        for clique_name in dict.fromkeys(group.clique_names):
            member = cliques.get(clique_name)
            if member is None or member.spec.replicas < 1:
                continue
            pclq = names.pcsg_pclq_name(pcsg, replicas - 1, clique_name)
            hostname = names.pod_name(pclq, member.spec.replicas - 1)
            if len(hostname) > names.MAX_NAME_LENGTH:
                yield _too_long(
                    f"spec.template.podCliqueScalingGroups[{index}].name",
                    hostname,
                    f"pod hostname of clique {clique_name!r}",
                )
    yield from _collision_problems(pcs, cliques, grouped)


def _too_long(path: str, generated: str, what: str) -> Problem:
    return Problem(
        path,
        f"generated {what} {generated!r} is {len(generated)} characters; names must be at most {names.MAX_NAME_LENGTH}",
    )


def _collision_problems(
    pcs: PodCliqueSet, cliques: Mapping[str, Any], grouped: set[str]
) -> Iterator[Problem]:
    """Names of one replica, relative to its `p-i-` prefix, must be unique: PodCliques are Kubernetes objects of
    one kind, and scaling groups and their replicas share the gang tree's (and KAI PodGroup's) name space."""
    owners: dict[str, str] = {}
    reported: set[tuple[str, str]] = set()

    def claim(relative: str, owner: str, path: str) -> Iterator[Problem]:
        other = owners.setdefault(relative, owner)
        if other != owner and (path, other) not in reported:
            reported.add((path, other))
            yield Problem(path, f"generated name '<pcs>-<replica>-{relative}' is also generated for {other}")

    standalone_seen: set[str] = set()
    for index, clique in enumerate(pcs.spec.template.cliques):
        if clique.name in cliques and clique.name not in grouped and clique.name not in standalone_seen:
            standalone_seen.add(clique.name)  # duplicates are reported by the clique rules already
            yield from claim(clique.name, f"cliques[{index}]", f"spec.template.cliques[{index}].name")
    groups_seen: set[str] = set()
    for index, group in enumerate(pcs.spec.template.pod_clique_scaling_groups):
        if _label_problem("", group.name) is not None or group.name in groups_seen:
            continue
        groups_seen.add(group.name)
        owner = f"podCliqueScalingGroups[{index}]"
        path = f"spec.template.podCliqueScalingGroups[{index}].name"
        yield from claim(group.name, owner, path)
        for replica in range(max(1 if group.replicas is None else group.replicas, 1)):
            yield from claim(f"{group.name}-{replica}", owner, path)
            for clique_name in dict.fromkeys(group.clique_names):
                if clique_name in cliques:
                    yield from claim(f"{group.name}-{replica}-{clique_name}", owner, path)


def _day2_problems(pcs: PodCliqueSet) -> Iterator[Problem]:
    """Startup order and autoscaling rules (DESIGN §4.10), kept in their own modules."""
    yield from startup_problems(pcs)
    yield from autoscaling_problems(pcs)
