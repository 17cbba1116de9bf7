"""Go duration strings: strict parsing, compact formatting, lossless round trips."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grove.durations import DURATION_PATTERN, DurationError, format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4h", timedelta(hours=4)),
        ("90s", timedelta(seconds=90)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("1h30m0s", timedelta(hours=1, minutes=30)),
        ("2h45m30.5s", timedelta(hours=2, minutes=45, seconds=30.5)),
        ("1.5h", timedelta(minutes=90)),
        (".5s", timedelta(milliseconds=500)),
        ("500ms", timedelta(milliseconds=500)),
        ("250us", timedelta(microseconds=250)),
        ("250\u00b5s", timedelta(microseconds=250)),
        ("3000ns", timedelta(microseconds=3)),
        ("0", timedelta(0)),
        ("-5m", timedelta(minutes=-5)),
        ("+5m", timedelta(minutes=5)),
    ],
)
def test_parses_go_durations(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", "4", "4 h", "h", "4d", "PT4H", "1h 30m", "--1h", "1.h.5", "4H", "1500ns", "300000000h"],
)
def test_rejects_anything_else_with_a_clear_error(text: str) -> None:
    with pytest.raises(DurationError) as error:
        parse_duration(text)
    assert repr(text) in str(error.value) or "duration" in str(error.value)


def test_rejects_non_strings() -> None:
    with pytest.raises(DurationError, match="not int"):
        parse_duration(14400)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (timedelta(hours=4), "4h"),
        (timedelta(hours=1, minutes=30), "1h30m"),
        (timedelta(seconds=90), "1m30s"),
        (timedelta(milliseconds=500), "500ms"),
        (timedelta(microseconds=7), "7us"),
        (timedelta(seconds=1, milliseconds=250), "1.25s"),
        (timedelta(0), "0s"),
        (timedelta(minutes=-5), "-5m"),
        (timedelta(days=2), "48h"),
    ],
)
def test_formats_compactly(value: timedelta, text: str) -> None:
    assert format_duration(value) == text


@given(st.timedeltas(min_value=timedelta(days=-10_000), max_value=timedelta(days=10_000)))
def test_format_then_parse_is_identity(value: timedelta) -> None:
    assert parse_duration(format_duration(value)) == value


@given(
    st.lists(
        st.tuples(st.integers(0, 10_000), st.sampled_from(["h", "m", "s", "ms", "us"])),
        min_size=1,
        max_size=5,
    )
)
def test_parse_sums_components(components: list[tuple[int, str]]) -> None:
    unit = {
        "h": timedelta(hours=1),
        "m": timedelta(minutes=1),
        "s": timedelta(seconds=1),
        "ms": timedelta(milliseconds=1),
        "us": timedelta(microseconds=1),
    }
    text = "".join(f"{n}{u}" for n, u in components)
    assert parse_duration(text) == sum((n * unit[u] for n, u in components), timedelta(0))


@pytest.mark.parametrize("text", ["4h", "1h30m", "90s", "0", "-5m", "250\u00b5s", "1.5h"])
def test_crd_pattern_accepts_what_the_parser_accepts(text: str) -> None:
    assert re.fullmatch(DURATION_PATTERN, text)


@pytest.mark.parametrize("text", ["", "4", "four hours", "4d", "PT4H"])
def test_crd_pattern_rejects_what_the_parser_rejects(text: str) -> None:
    assert not re.fullmatch(DURATION_PATTERN, text)


def test_crd_pattern_has_no_escapes_go_regexp_lacks() -> None:
    # The apiserver compiles the pattern with Go's RE2, which rejects \u escapes.
    assert "\\u" not in DURATION_PATTERN
