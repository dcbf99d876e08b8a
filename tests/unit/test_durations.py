"""parse_duration / format_duration: the one duration grammar users type."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cluster.errors import InvalidInput
from cluster.timing.durations import format_duration, parse_duration

FORMATTED = re.compile(r"-?(\d+d)?(\d+h)?(\d+m)?(\d+s)?(\d+ms)?")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("500ms", 0.5),
        ("30s", 30.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("2d", 172_800.0),
        ("1h30m15s", 5415.0),
        ("1d2h3m4s5ms", 93_784.005),
        ("1m500ms", 60.5),
        ("90", 90.0),
        ("1.5", 1.5),
        ("1.5h", 5400.0),
        ("0", 0.0),
        ("0s", 0.0),
        ("  30s\n", 30.0),
        ("007s", 7.0),
    ],
)
def test_parses(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("text", "hint"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("-5s", "negative"),
        ("-5", "negative"),
        ("30s5m", "order"),
        ("5m5m", "order"),
        ("1ms1s", "order"),
        ("abc", "expected a duration"),
        ("5x", "expected a duration"),
        ("1h 30m", "expected a duration"),
        ("5M", "expected a duration"),
        ("1e3", "expected a duration"),
        (".5s", "expected a duration"),
        ("5.s", "expected a duration"),
        ("s", "expected a duration"),
        ("ms", "expected a duration"),
        ("+5s", "expected a duration"),
        ("\u0663s", "expected a duration"),  # ARABIC-INDIC DIGIT THREE: not ASCII
        ("9" * 400, "too large"),
    ],
)
def test_rejects(text: str, hint: str) -> None:
    with pytest.raises(InvalidInput) as info:
        parse_duration(text)
    assert info.value.field == "duration"
    assert hint in info.value.problem


def test_error_names_the_given_field() -> None:
    with pytest.raises(InvalidInput, match=r"^timeout: ") as info:
        parse_duration("soon", "timeout")
    assert info.value.field == "timeout"
    assert isinstance(info.value, ValueError)


def test_rejects_non_strings() -> None:
    with pytest.raises(InvalidInput):
        parse_duration(30)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (5400, "1h30m"),
        (0.5, "500ms"),
        (0, "0s"),
        (30, "30s"),
        (86_400, "1d"),
        (90_061.25, "1d1h1m1s250ms"),
        (59.9999, "1m"),  # rounded to the millisecond
        (0.0004, "0s"),
        (-90, "-1m30s"),
    ],
)
def test_formats(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_format_rejects_non_finite(bad: float) -> None:
    with pytest.raises(ValueError, match="non-finite"):
        format_duration(bad)


@given(st.integers(min_value=0, max_value=10**13))
def test_format_then_parse_round_trips_milliseconds(ms: int) -> None:
    text = format_duration(ms / 1000)
    assert FORMATTED.fullmatch(text)
    assert round(parse_duration(text) * 1000) == ms


@given(
    st.lists(st.integers(min_value=0, max_value=10_000), min_size=5, max_size=5),
    st.lists(st.booleans(), min_size=5, max_size=5),
)
def test_any_ordered_combination_parses_to_its_sum(counts: list[int], keep: list[bool]) -> None:
    units = [("d", 86_400.0), ("h", 3600.0), ("m", 60.0), ("s", 1.0), ("ms", 0.001)]
    chosen = [(n, unit, size) for n, (unit, size), k in zip(counts, units, keep, strict=True) if k]
    if not chosen:
        chosen = [(counts[0], "s", 1.0)]
    text = "".join(f"{n}{unit}" for n, unit, _ in chosen)
    assert parse_duration(text) == pytest.approx(sum(n * size for n, _, size in chosen))


@given(st.text(max_size=20))
def test_garbage_raises_only_invalid_input(text: str) -> None:
    try:
        seconds = parse_duration(text)
    except InvalidInput:
        return
    assert math.isfinite(seconds)
    assert seconds >= 0
