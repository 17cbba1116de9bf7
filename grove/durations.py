"""Go / metav1 duration strings ("4h", "90s", "1h30m") <-> `timedelta`.

Kubernetes serialises `metav1.Duration` with Go's `time.ParseDuration` grammar, so manifests carry strings such as
"4h" or "1h30m0s". Python code works with `timedelta`. Parsing is strict (no ISO 8601, no bare numbers) so that a
manifest the apiserver would store is exactly a manifest we accept.
"""

from __future__ import annotations

import re
from datetime import timedelta
from fractions import Fraction

# Microseconds per unit. Go also accepts "ns"; we accept it when the total is a whole number of microseconds.
_UNIT_MICROS: dict[str, Fraction] = {
    "ns": Fraction(1, 1000),
    "us": Fraction(1),
    "\u00b5s": Fraction(1),  # micro sign, as Go prints it
    "\u03bcs": Fraction(1),  # greek mu, also accepted by Go
    "ms": Fraction(1000),
    "s": Fraction(1_000_000),
    "m": Fraction(60_000_000),
    "h": Fraction(3_600_000_000),
}
_COMPONENT = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")
# Go stores durations as int64 nanoseconds; anything longer would not survive a round trip through Grove.
_MAX_MICROS = (2**63 - 1) // 1000

# For the CRD schema. Go's RE2 has no \u escapes, so the micro signs are written as the characters themselves.
DURATION_PATTERN = r"^[-+]?(0|((\d+\.?\d*|\.\d+)(ns|us|" + "\u00b5s|\u03bcs" + r"|ms|s|m|h))+)$"
DURATION_HINT = "a duration such as '4h', '90s' or '1h30m'"


class DurationError(ValueError):
    """A string that is not a Go duration."""


def parse_duration(text: str) -> timedelta:
    """Parse a Go duration string. Raises DurationError with a message that says what is wrong."""
    if not isinstance(text, str):
        raise DurationError(f"must be {DURATION_HINT}, not {type(text).__name__}")
    body = text
    sign = 1
    if body and body[0] in "+-":
        sign = -1 if body[0] == "-" else 1
        body = body[1:]
    if body == "0":
        return timedelta(0)
    if not body:
        raise DurationError(f"must be {DURATION_HINT}, got {text!r}")
    total = Fraction(0)
    position = 0
    while position < len(body):
        match = _COMPONENT.match(body, position)
        if match is None:
            raise DurationError(f"must be {DURATION_HINT}, got {text!r}")
        total += Fraction(match.group(1)) * _UNIT_MICROS[match.group(2)]
        position = match.end()
    if total.denominator != 1:
        raise DurationError(f"{text!r} is finer than a microsecond, which is not supported")
    micros = int(total)
    if micros > _MAX_MICROS:
        raise DurationError(f"{text!r} is longer than the longest Go duration (about 292 years)")
    return sign * timedelta(microseconds=micros)


def format_duration(value: timedelta) -> str:
    """Compact Go duration text: "4h", "1h30m", "1m30s", "500ms"; "0s" for zero. Parses back to the same value."""
    micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    if micros == 0:
        return "0s"
    sign = "-" if micros < 0 else ""
    micros = abs(micros)
    if micros < 1_000_000:
        if micros % 1000 == 0:
            return f"{sign}{micros // 1000}ms"
        return f"{sign}{micros}us"
    hours, rest = divmod(micros, 3_600_000_000)
    minutes, rest = divmod(rest, 60_000_000)
    seconds, fraction = divmod(rest, 1_000_000)
    parts = []
    if hours:
        parts.append(f"{hours}h")
    if minutes:
        parts.append(f"{minutes}m")
    if seconds or fraction:
        text = str(seconds)
        if fraction:
            text += "." + f"{fraction:06d}".rstrip("0")
        parts.append(f"{text}s")
    return sign + "".join(parts)
