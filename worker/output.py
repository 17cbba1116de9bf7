"""The one machine-readable schema of every read command (`-o json` / `-o yaml`), Kubernetes style.

- keys are camelCase (`podCliqueSet`, `breachStart`, `terminationsTotal`);
- times are RFC 3339 in UTC (`2026-11-23T17:02:03.5Z`), durations Go duration text (`2h`, `1m30s`);
- booleans are JSON booleans; a tri-state condition status (`True`/`False`/`Unknown`) is `true`/`false`/`null`;
- enums are their values (`Breached`), absent values are `null`.

Tables are for people and may change; this schema only grows (new keys), keys are never renamed or removed.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic.alias_generators import to_camel

from grove.durations import format_duration

FORMATS = ("json", "yaml")
TRISTATE_KEYS = frozenset({"breached"})
_TRISTATE = {"True": True, "False": False, "Unknown": None}


def wire(value: Any, key: str | None = None) -> Any:
    """`value` in the CLI schema."""
    if isinstance(value, BaseModel):
        return wire({name: getattr(value, name) for name in type(value).model_fields})
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return wire({f.name: getattr(value, f.name) for f in dataclasses.fields(value)})
    if isinstance(value, Mapping):
        return {to_camel(str(k)): wire(v, str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [wire(item) for item in value]
    if isinstance(value, Enum):
        return wire(value.value, key)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, datetime):
        return rfc3339(value)
    if isinstance(value, timedelta):
        return format_duration(value)
    if isinstance(value, str) and key in TRISTATE_KEYS and value in _TRISTATE:
        return _TRISTATE[value]
    return value


def with_placement(statuses: Sequence[Any], placement: Callable[[Any], list[str]]) -> list[Any]:
    """`status -o json|yaml`: each replica status plus `placement`, the lines saying why its base gang is not placed
    (worker.placement: the PodGroup condition, the scheduler's FailedScheduling cause), [] when it is not waiting."""
    return [{**wire(status), "placement": list(placement(status))} for status in statuses]


def rfc3339(moment: datetime) -> str:
    aware = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    text = aware.astimezone(UTC).isoformat()
    return text.replace("+00:00", "Z")


def render(data: Any, output: str, *, compact: bool = False) -> str:
    """JSON (indented, or one line with compact=True, for --watch streams) or YAML of wire(data)."""
    converted = wire(data)
    if output == "json":
        return json.dumps(converted, separators=(",", ":")) if compact else json.dumps(converted, indent=2)
    if output == "yaml":
        text = yaml.safe_dump(converted, sort_keys=False, allow_unicode=True, width=4096)
        return ("---\n" + text) if compact else text
    raise ValueError(f"unknown output format {output!r}")
