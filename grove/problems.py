"""`field.path: message` problems, and the translation of pydantic errors into them.

Paths use the wire (camelCase) names and `[index]` for list items, e.g.
`spec.template.podCliqueScalingGroups[1].minAvailable`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

ROOT = "(document)"


@dataclass(frozen=True, order=True)
class Problem:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def join_path(loc: Sequence[str | int]) -> str:
    """('spec', 'cliques', 0, 'name') -> 'spec.cliques[0].name'."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif text:
            text += f".{part}"
        else:
            text = str(part)
    return text or ROOT


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"string {shown!r}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"{type(value).__name__} {value!r}"


_TYPE_MESSAGES = {
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "string_type": "must be a string",
    "bool_type": "must be true or false",
    "list_type": "must be a list",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "float_type": "must be a number",
    "datetime_type": "must be an RFC 3339 timestamp",
    "datetime_parsing": "must be an RFC 3339 timestamp",
    "datetime_from_date_parsing": "must be an RFC 3339 timestamp",
}


def _message(error: Any) -> str:
    kind = error["type"]
    if kind == "missing":
        return "required"
    if kind == "literal_error":
        expected = error.get("ctx", {}).get("expected", "")
        return f"must be {expected}, got {_describe(error.get('input'))}"
    if kind == "value_error":
        return str(error.get("ctx", {}).get("error", error["msg"]))
    if kind in _TYPE_MESSAGES:
        return f"{_TYPE_MESSAGES[kind]}, got {_describe(error.get('input'))}"
    return str(error["msg"])


def from_validation_error(error: ValidationError, prefix: Sequence[str | int] = ()) -> list[Problem]:
    problems = []
    for item in error.errors():
        loc = [part for part in item["loc"] if not _is_union_tag(part)]
        problems.append(Problem(join_path([*prefix, *loc]), _message(item)))
    return list(dict.fromkeys(problems))  # drop duplicates, keep order


def _is_union_tag(part: str | int) -> bool:
    # pydantic inserts the union member's name (e.g. 'function-plain[...]') into locations; not a wire field.
    return isinstance(part, str) and ("[" in part or part.endswith("()"))


def unknown_fields(model: BaseModel, prefix: Sequence[str | int] = ()) -> list[Problem]:
    """Fields a manifest carries that we do not model: kept as they are, reported so that typos are visible."""
    found = [
        Problem(join_path([*prefix, key]), "unknown field (kept as is)") for key in model.model_extra or {}
    ]
    for name, field in type(model).model_fields.items():
        key = field.alias or name
        found.extend(_unknown_in(getattr(model, name), [*prefix, key]))
    return found


def _unknown_in(value: Any, loc: list[str | int]) -> Iterable[Problem]:
    if isinstance(value, BaseModel):
        return unknown_fields(value, loc)
    if isinstance(value, list):
        return [problem for index, item in enumerate(value) for problem in _unknown_in(item, [*loc, index])]
    return []
