"""The PodCliqueSet rules, written once and rendered twice: as `x-kubernetes-validations` (CEL), schema keywords
and schema defaults in the generated CRD (grove/crds.py), so that `kubectl apply` refuses bad input at the door;
and as Python checks in `grove.validation`, which `grove-temporal validate` and the replica workflows run.

Adding a rule: append a `Rule` (a CEL-expressible check, see grove/expr.py), a `Bound` (an OpenAPI keyword such as
maxItems) or a `Default` below, attached to the schema node it checks: `ROOT` (the whole object, which sees
`metadata.name`) or the name of a model class of grove/models (its node wherever it occurs in the PodCliqueSet
CRD). Rules only CEL cannot express go to `WORKFLOW_ONLY` with the reason, and stay in grove/validation.py.

Rules on the smallest node that holds their fields keep errors precise and let the apiserver's ratcheting work
per list item (cliques and scaling groups are map lists keyed by name). Every CEL rule is also rendered in a
transition form (`optionalOldSelf`): an update is never refused by a rule the stored object already broke, so
objects created before a rule existed stay editable; the workflow path keeps reporting them (condition + Event).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from grove import names
from grove.expr import SELF, Env, EvalError, Expr, Get, Msg, Render, Var, dur, failures, has, size
from grove.problems import Problem

ROOT = "PodCliqueSet"
"""The node of the whole object: the only one whose rules may read `self.metadata.name`."""

DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_LABEL_SUMMARY = ("must be a DNS-1123 label (lower-case letters, digits and '-', starting and ending with a letter "
                  "or digit)")
_LABEL_TEXT = "is not a DNS-1123 label (lower-case letters, digits and '-', starting and ending with a letter or digit)"
MAX_CLIQUES = 32
MAX_SCALING_GROUPS = 16
MAX_CLIQUE_NAMES = 16


@dataclass(frozen=True)
class Rule:
    """A check rendered as a CEL validation rule on `node` and as a Python check of every instance of `node`.

    `at` is the field a problem names (a path from `self` or from an `all` macro's variable: the Python rendering
    names the failing list item, e.g. `cliqueNames[1]`). CEL's fieldPath cannot hold list indices, so when `at`
    goes through a macro variable, `cel_at` says which field of `self` the apiserver's message names, and
    `summary` is the CEL message (the Python message may name the failing item).
    """

    id: str
    node: str
    check: Expr
    at: Expr
    message: Msg
    cel_at: Get | None = None
    summary: str | None = None
    admission: bool = True  # False: checked on the workflow path only (listed in WORKFLOW_ONLY, with the reason)

    def __post_init__(self) -> None:
        # CEL messages are static: the apiserver's cost estimate of string() (an int's text, or any string the
        # schema does not bound) is unbounded, and a messageExpression using it makes the CRD refuse to load.
        if self.message.args and self.summary is None and self.admission:
            raise ValueError(f"rule {self.id}: a message with values needs a static summary for CEL")
        target = self.cel_at if self.cel_at is not None else self.at
        if not isinstance(target, Var | Get) or (isinstance(target, Get) and target.self_path() is None):
            raise ValueError(f"rule {self.id}: CEL can only name a field of self; set cel_at")

    def field_path(self) -> str | None:
        target = self.cel_at if self.cel_at is not None else self.at
        return target.self_path() if isinstance(target, Get) else None

    def to_cel(self) -> dict[str, Any]:
        """The x-kubernetes-validations entry: the check, or a transition the stored object already failed."""
        now = self.check.cel()
        before = self.check.cel(Render({"self": "oldSelf.value()"}))
        wire: dict[str, Any] = {
            "rule": f"{now} || (oldSelf.hasValue() && !{before})",
            "optionalOldSelf": True,
            "reason": "FieldValueInvalid",
        }
        wire["message"] = self.summary if self.summary is not None else self.message.template
        path = self.field_path()
        if path:
            wire["fieldPath"] = path
        return wire

    def problems(self, node: Any, path: str) -> list[Problem]:
        try:
            failed = failures(self.check, Env.of(node, path))
            return [Problem(self.at.path(env), self.message.text(env)) for env in failed]
        except EvalError:
            # Only a field the parser already refused (or a missing metadata.name, which has its own problem).
            return []


@dataclass(frozen=True)
class Bound:
    """An OpenAPI keyword on `field` of `node` (`name[]` for the items of list `name`): maxItems, minItems,
    maxLength or minimum. The CRD gets the keyword (CEL's cost estimates need bounded lists and strings)."""

    node: str
    field: str
    keyword: str
    limit: int

    def problems(self, node: Mapping[str, Any], path: str) -> list[Problem]:
        key, items = (self.field[:-2], True) if self.field.endswith("[]") else (self.field, False)
        value = node.get(key)
        if value is None:
            return []
        targets = [(f"{path}.{key}[{i}]", item) for i, item in enumerate(value)] if items else [(f"{path}.{key}", value)]
        found = []
        for where, item in targets:
            message = self._violation(item)
            if message:
                found.append(Problem(where, message))
        return found

    def _violation(self, value: Any) -> str | None:
        if self.keyword == "maxItems" and isinstance(value, list) and len(value) > self.limit:
            return f"must have at most {self.limit} items, got {len(value)}"
        if self.keyword == "minItems" and isinstance(value, list) and len(value) < self.limit:
            return f"must have at least {self.limit} items, got {len(value)}"
        if self.keyword == "maxLength" and isinstance(value, str) and len(value) > self.limit:
            return f"must be at most {self.limit} characters, got {len(value)}"
        if self.keyword == "minimum" and isinstance(value, int) and value < self.limit:
            return f"must be {self.limit} or more, got {value}"
        return None


@dataclass(frozen=True)
class Default:
    """A schema default: the apiserver fills it in on create, update and read; Python fills it in before checking."""

    node: str
    field: str
    value: Any


@dataclass(frozen=True)
class WorkflowOnly:
    """A rule that stays on the workflow path (condition SpecValid=False + Event), and why."""

    path: str
    rule: str
    why: str


# --- the rules -------------------------------------------------------------------------------------------------
_name = SELF.f("metadata").f("name")
_groups = SELF.f("podCliqueScalingGroups")
_g, _n = Var("g"), Var("n")
_known = SELF.f("cliques").exists("c", Var("c").f("name").eq(_n))
_first_claimant = _groups.filter("h", Var("h").f("cliqueNames").contains(_n))[0]
_POSITIVE = dur("0s")

RULES: tuple[Rule, ...] = (
    # metadata.name (the object root is the only node that sees it)
    Rule("pcs-name-length", ROOT, ~has(_name) | (size(_name) <= names.MAX_NAME_LENGTH), _name,
         Msg(f"must be at most {names.MAX_NAME_LENGTH} characters, got {{}}", size(_name)),
         summary=f"must be at most {names.MAX_NAME_LENGTH} characters (names of generated objects and labels)"),
    # The apiserver's estimate of a regex over metadata.name (a length the CRD schema cannot bound) exceeds CEL's
    # cost budget: these two stay on the workflow path. Its own name check already refuses upper case and '_'.
    Rule("pcs-name-dns-label", ROOT,
         ~has(_name) | (size(_name) > names.MAX_NAME_LENGTH) | _name.matches(DNS1123_LABEL),
         _name, Msg(f"'{{}}' {_LABEL_TEXT}", _name), admission=False),
    Rule("pcs-name-starts-with-letter", ROOT,
         ~has(_name) | (size(_name) > names.MAX_NAME_LENGTH) | ~_name.matches(DNS1123_LABEL)
         | _name.matches("^[a-z]"),
         _name, Msg("must start with a letter (the headless Service is named {}-<replica>)", _name),
         admission=False),
    # spec
    Rule("pcs-replicas", "PodCliqueSetSpec", SELF.f("replicas") >= 0, SELF.f("replicas"),
         Msg("must be 0 or more, got {}", SELF.f("replicas")), summary="must be 0 or more"),
    # spec.template
    Rule("cliques-required", "PodCliqueSetTemplateSpec", size(SELF.f("cliques")) >= 1, SELF.f("cliques"),
         Msg("at least one clique is required")),
    Rule("pcs-termination-delay-positive", "PodCliqueSetTemplateSpec",
         ~has(SELF.f("terminationDelay")) | (dur(SELF.f("terminationDelay")) > _POSITIVE),
         SELF.f("terminationDelay"), Msg("must be greater than 0 (omit it to disable gang termination)")),
    Rule("pcsg-clique-known", "PodCliqueSetTemplateSpec",
         ~has(_groups) | _groups.all("g", _g.f("cliqueNames").all(
             "n", (size(_n) > names.MAX_NAME_LENGTH) | _known)),
         _n, Msg("unknown clique '{}'", _n), cel_at=_groups,
         summary="every cliqueNames entry must name a clique of spec.template.cliques"),
    Rule("pcsg-clique-in-one-group", "PodCliqueSetTemplateSpec",
         ~has(_groups) | _groups.all("g", _g.f("cliqueNames").all(
             "n", ~_known | _first_claimant.f("name").eq(_g.f("name")))),
         _n, Msg("clique '{}' already belongs to scaling group '{}'", _n, _first_claimant.f("name")),
         cel_at=_groups, summary="a clique may belong to one scaling group only"),
    Rule("pcsg-termination-delay-needs-pcs-delay", "PodCliqueSetTemplateSpec",
         has(SELF.f("terminationDelay")) | ~has(_groups)
         | _groups.all("g", ~has(_g.f("terminationDelay"))),
         _g.f("terminationDelay"),
         Msg("cannot be set while spec.template.terminationDelay is unset "
             "(gang termination is off for the PodCliqueSet)"), cel_at=_groups,
         summary="a scaling group terminationDelay cannot be set while spec.template.terminationDelay is unset "
                 "(gang termination is off for the PodCliqueSet)"),
    # spec.template.cliques[]
    Rule("clique-name-dns-label", "PodCliqueTemplateSpec",
         (size(SELF.f("name")) > names.MAX_NAME_LENGTH) | SELF.f("name").matches(DNS1123_LABEL),
         SELF.f("name"), Msg(f"'{{}}' {_LABEL_TEXT}", SELF.f("name")), summary=_LABEL_SUMMARY),
    Rule("clique-replicas", "PodCliqueSpec", SELF.f("replicas") >= 1, SELF.f("replicas"),
         Msg("must be at least 1, got {}", SELF.f("replicas")), summary="must be at least 1"),
    Rule("clique-min-available", "PodCliqueSpec",
         ~has(SELF.f("minAvailable")) | (SELF.f("replicas") < 1)
         | ((SELF.f("minAvailable") >= 1) & (SELF.f("minAvailable") <= SELF.f("replicas"))),
         SELF.f("minAvailable"), Msg("must be between 1 and replicas ({})", SELF.f("replicas")),
         summary="must be between 1 and replicas"),
    # spec.template.podCliqueScalingGroups[]
    Rule("pcsg-name-dns-label", "PodCliqueScalingGroupConfig",
         (size(SELF.f("name")) > names.MAX_NAME_LENGTH) | SELF.f("name").matches(DNS1123_LABEL),
         SELF.f("name"), Msg(f"'{{}}' {_LABEL_TEXT}", SELF.f("name")), summary=_LABEL_SUMMARY),
    Rule("pcsg-clique-names-required", "PodCliqueScalingGroupConfig", size(SELF.f("cliqueNames")) >= 1,
         SELF.f("cliqueNames"), Msg("at least one clique name is required")),
    Rule("pcsg-clique-listed-once", "PodCliqueScalingGroupConfig",
         SELF.f("cliqueNames").all("n", size(SELF.f("cliqueNames").filter("m", Var("m").eq(_n))) <= 1),
         SELF.f("cliqueNames"), Msg("clique '{}' is listed twice", _n),
         summary="every clique may be listed once"),
    Rule("pcsg-replicas", "PodCliqueScalingGroupConfig", SELF.f("replicas") >= 1, SELF.f("replicas"),
         Msg("must be at least 1, got {}", SELF.f("replicas")), summary="must be at least 1"),
    Rule("pcsg-min-available", "PodCliqueScalingGroupConfig",
         (SELF.f("replicas") < 1)
         | ((SELF.f("minAvailable") >= 1) & (SELF.f("minAvailable") <= SELF.f("replicas"))),
         SELF.f("minAvailable"), Msg("must be between 1 and replicas ({})", SELF.f("replicas")),
         summary="must be between 1 and replicas"),
    Rule("pcsg-termination-delay-positive", "PodCliqueScalingGroupConfig",
         ~has(SELF.f("terminationDelay")) | (dur(SELF.f("terminationDelay")) > _POSITIVE),
         SELF.f("terminationDelay"), Msg("must be greater than 0")),
    # rolling updates (DESIGN §4.9; the rules across nodes are in grove/rollout.py)
    Rule("update-strategy-type", "PodCliqueSetUpdateStrategy",
         ~has(SELF.f("type")) | SELF.f("type").eq(names.STRATEGY_ROLLING_RECREATE)
         | SELF.f("type").eq(names.STRATEGY_ON_DELETE),
         SELF.f("type"), Msg(f"must be one of {', '.join(names.UPDATE_STRATEGIES)}, got '{{}}'", SELF.f("type")),
         summary=f"must be one of {', '.join(names.UPDATE_STRATEGIES)}"),
    Rule("rolling-update-max-unavailable", "RollingUpdateConfiguration",
         ~has(SELF.f("maxUnavailable")) | (SELF.f("maxUnavailable") >= 1), SELF.f("maxUnavailable"),
         Msg("must be at least 1, got {}", SELF.f("maxUnavailable")), summary="must be at least 1"),
    Rule("rolling-update-progress-deadline-positive", "RollingUpdateConfiguration",
         ~has(SELF.f("progressDeadline")) | (dur(SELF.f("progressDeadline")) > _POSITIVE),
         SELF.f("progressDeadline"), Msg("must be greater than 0 (omit it for no deadline)")),
)

BOUNDS: tuple[Bound, ...] = (
    Bound("PodCliqueTemplateSpec", "name", "maxLength", names.MAX_NAME_LENGTH),
    Bound("PodCliqueScalingGroupConfig", "name", "maxLength", names.MAX_NAME_LENGTH),
    Bound("PodCliqueScalingGroupConfig", "cliqueNames[]", "maxLength", names.MAX_NAME_LENGTH),
    Bound("PodCliqueScalingGroupConfig", "cliqueNames", "maxItems", MAX_CLIQUE_NAMES),
    Bound("PodCliqueSetTemplateSpec", "cliques", "maxItems", MAX_CLIQUES),
    Bound("PodCliqueSetTemplateSpec", "podCliqueScalingGroups", "maxItems", MAX_SCALING_GROUPS),
)

DEFAULTS: tuple[Default, ...] = (
    Default("PodCliqueSetSpec", "replicas", 1),
    Default("PodCliqueSpec", "replicas", 1),
    Default("PodCliqueScalingGroupConfig", "replicas", 1),
    Default("PodCliqueScalingGroupConfig", "minAvailable", 1),
)

WORKFLOW_ONLY: tuple[WorkflowOnly, ...] = (
    WorkflowOnly("metadata.name", "a DNS-1123 label starting with a letter (no '.', no leading digit)",
                 "a regex over metadata.name exceeds CEL's cost budget (the schema cannot bound its length); the "
                 "apiserver's own name check refuses upper case, '_' and names over 253 characters"),
    WorkflowOnly(f"metadata.annotations[{names.ANNOTATION_SCALED_RELEASE_AFTER}]",
                 f"one of {', '.join(names.RELEASE_AFTER_VALUES)}",
                 "CEL rules of a CRD cannot read metadata.annotations"),
    WorkflowOnly("spec.template.cliques[].name, podCliqueScalingGroups[].name",
                 "every generated object name (pod hostnames of the last replica) fits 63 characters",
                 "needs the names of every replica and pod index: string building beyond CEL's cost budget"),
    WorkflowOnly("spec.template.cliques[].name, podCliqueScalingGroups[].name",
                 "generated names of one replica do not collide (a clique named like a scaling group replica)",
                 "needs every generated name of a replica compared with every other"),
    WorkflowOnly("spec.template.terminationDelay, podCliqueScalingGroups[].terminationDelay",
                 "whole microseconds, at most 2562047h (Go's int64 nanoseconds)",
                 "CEL's duration() accepts nanoseconds; Python's timedelta does not"),
)
"""Rules that stay on the workflow path (validate + SpecValid=False condition + InvalidSpec Event)."""


# --- Python rendering ------------------------------------------------------------------------------------------
def rules_for(node: str) -> list[Rule]:
    return [rule for rule in RULES if rule.node == node]


def default_of(node: str, field: str) -> Any:
    return next(copy.deepcopy(d.value) for d in DEFAULTS if (d.node, d.field) == (node, field))


def apply_defaults(node: str, data: dict[str, Any]) -> None:
    for default in DEFAULTS:
        if default.node == node and data.get(default.field) is None:
            data[default.field] = copy.deepcopy(default.value)


def nodes(model: BaseModel, wire: dict[str, Any], path: str = "", node: str | None = None) -> Iterator[
        tuple[str, dict[str, Any], str]]:
    """(node name, wire data with defaults, wire path) of `model` and every model inside it, parents first.

    Defaults are filled into `wire` in place, so children see them too; callers pass a copy."""
    name = node or type(model).__name__
    apply_defaults(name, wire)
    yield name, wire, path
    for field_name, info in type(model).model_fields.items():
        key = info.alias or field_name
        value, child = getattr(model, field_name), wire.get(key)
        where = f"{path}.{key}" if path else key
        if isinstance(value, BaseModel) and isinstance(child, dict):
            yield from nodes(value, child, where)
        elif isinstance(value, list) and isinstance(child, list):
            for index, (item, item_wire) in enumerate(zip(value, child, strict=False)):
                if isinstance(item, BaseModel) and isinstance(item_wire, dict):
                    yield from nodes(item, item_wire, f"{where}[{index}]")


def problems(model: BaseModel, unknown: frozenset[str] = frozenset()) -> list[Problem]:
    """Every problem the shared rules find in a parsed PodCliqueSet (bounds, then rules, per node).

    `unknown`: wire paths of fields left out because they were malformed; rules that read them are not checked."""
    wire = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    found: list[Problem] = []
    for name, data, path in nodes(model, wire, "", ROOT):
        for bound in BOUNDS:
            if bound.node == name:
                found.extend(bound.problems(data, path))
        for rule in rules_for(name):
            if not _reads_any(path, rule.check.reads(), unknown):
                found.extend(rule.problems(data, path))
    return list(dict.fromkeys(found))


def _reads_any(path: str, reads: set[str], unknown: frozenset[str]) -> bool:
    for read in reads:
        full = f"{path}{read}" if path else read[1:]
        if any(u == full or u.startswith(full + ".") or u.startswith(full + "[") or full.startswith(u + ".")
               for u in unknown):
            return True
    return False


# --- CRD rendering ---------------------------------------------------------------------------------------------
def schema_additions(node: str) -> dict[str, Any]:
    """What the CRD generator adds to the schema of `node`: x-kubernetes-validations, and per property the
    bounds and defaults, as {"x-kubernetes-validations": [...], "properties": {field: {keyword: value}}}."""
    additions: dict[str, Any] = {}
    validations = [rule.to_cel() for rule in rules_for(node) if rule.admission]
    if validations:
        additions["x-kubernetes-validations"] = validations
    properties: dict[str, dict[str, Any]] = {}
    for bound in BOUNDS:
        if bound.node == node:
            if bound.field.endswith("[]"):
                items = properties.setdefault(bound.field[:-2], {}).setdefault("items", {})
                items[bound.keyword] = bound.limit
            else:
                properties.setdefault(bound.field, {})[bound.keyword] = bound.limit
    for default in DEFAULTS:
        if default.node == node:
            properties.setdefault(default.field, {})["default"] = default.value
    if node == ROOT:
        # The root rules name metadata.name (fieldPath must exist in the schema) and match it with a regex (CEL's
        # cost estimate needs its length bounded): the apiserver's own limit for object names, 253.
        properties["metadata"] = {"properties": {"name": {"type": "string", "maxLength": 253}}}
    if properties:
        additions["properties"] = properties
    return additions


def nodes_with_additions() -> set[str]:
    return {r.node for r in RULES} | {b.node for b in BOUNDS} | {d.node for d in DEFAULTS}
