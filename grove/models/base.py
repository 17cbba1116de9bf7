"""Shared building blocks of the wire models: the base class, object metadata, conditions, durations.

Every model uses camelCase on the wire (aliases) and snake_case in Python, keeps fields it does not model
(extra="allow") so that a manifest round-trips losslessly, and serialises back with `to_wire()`.
Integers are strict: the apiserver rejects `replicas: "3"`, so we do too.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    StrictBool,
    StrictInt,
    WithJsonSchema,
)
from pydantic.alias_generators import to_camel

from grove.durations import DURATION_HINT, DURATION_PATTERN, DurationError, format_duration, parse_duration


def _validate_duration(value: Any) -> timedelta:
    if isinstance(value, timedelta):
        return value
    if isinstance(value, str):
        try:
            return parse_duration(value)
        except DurationError as error:
            raise ValueError(str(error)) from None
    raise ValueError(f"must be {DURATION_HINT}, not {type(value).__name__}")


Duration = Annotated[
    timedelta,
    PlainValidator(_validate_duration),
    PlainSerializer(format_duration, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "pattern": DURATION_PATTERN}),
]
"""A metav1.Duration: Go duration text on the wire, `timedelta` in Python."""

Int = StrictInt
Bool = StrictBool

Passthrough = Annotated[
    dict[str, Any],
    WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
]
"""Structured Kubernetes data we carry but do not interpret (PodSpec, topology constraints, ...)."""

StringMap = dict[str, str]


class WireModel(BaseModel):
    """Base of every wire model: camelCase aliases, unknown fields kept."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="allow",
        serialize_by_alias=True,
    )

    def to_wire(self, *, exclude_unset: bool = False) -> dict[str, Any]:
        """The JSON-ready dict Kubernetes expects (camelCase, durations as text, no nulls).

        exclude_unset=True reproduces a parsed manifest exactly (no defaults added).
        """
        return self.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_unset=exclude_unset)


class OwnerReference(WireModel):
    api_version: str
    kind: str
    name: str
    uid: str
    controller: Bool | None = None
    block_owner_deletion: Bool | None = None


class ObjectMeta(WireModel):
    """The parts of metav1.ObjectMeta we read; the rest is kept as extra fields."""

    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: Int | None = None
    creation_timestamp: datetime | None = None
    deletion_timestamp: datetime | None = None
    labels: StringMap | None = None
    annotations: StringMap | None = None
    owner_references: list[OwnerReference] | None = None
    finalizers: list[str] | None = None


class Condition(WireModel):
    """metav1.Condition."""

    type: str
    status: str = Field(description="True, False or Unknown")
    reason: str | None = None
    message: str | None = None
    last_transition_time: datetime | None = None
    observed_generation: Int | None = None


class NamespacedName(WireModel):
    namespace: str
    name: str
