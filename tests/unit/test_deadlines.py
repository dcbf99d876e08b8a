"""``--deadline HH:MM``: the first such wall time in the job's zone after the slot, mapped to
UTC as schedule times are (a repeated hour: its first occurrence; a skipped hour: the first
instant after the gap)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cluster.errors import InvalidInput
from cluster.jobs.expectations import expectations, parse_baseline
from cluster.timing.deadlines import deadline_after, parse_deadline


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("slot", "deadline", "tz", "expected"),
    [
        # The same day, or the next when the slot is after it.
        (utc(2026, 6, 1, 2, 0), "06:00", "UTC", utc(2026, 6, 1, 6, 0)),
        (utc(2026, 6, 1, 6, 0), "06:00", "UTC", utc(2026, 6, 2, 6, 0)),
        (utc(2026, 6, 1, 21, 0), "06:00", "Europe/Berlin", utc(2026, 6, 2, 4, 0)),
        # Berlin springs forward at 02:00 on 29 March: 06:00 is CEST that morning.
        (utc(2026, 3, 28, 22, 0), "06:00", "Europe/Berlin", utc(2026, 3, 29, 4, 0)),
        # 02:30 does not exist that night: the first instant after the gap (03:00 CEST).
        (utc(2026, 3, 28, 22, 0), "02:30", "Europe/Berlin", utc(2026, 3, 29, 1, 0)),
        # Back to CET at 03:00 on 25 October: 02:30 happens twice; the first counts.
        (utc(2026, 10, 24, 22, 0), "02:30", "Europe/Berlin", utc(2026, 10, 25, 0, 30)),
        (utc(2026, 10, 24, 22, 0), "06:00", "Europe/Berlin", utc(2026, 10, 25, 5, 0)),
        # New York, a day of 23 hours.
        (utc(2026, 3, 8, 4, 0), "06:00", "America/New_York", utc(2026, 3, 8, 10, 0)),
    ],
)
def test_the_deadline_of_a_slot(slot: datetime, deadline: str, tz: str, expected: datetime) -> None:
    assert deadline_after(slot, deadline, tz) == expected


@pytest.mark.parametrize("bad", ["6", "24:00", "06:60", "6am", "06:00:00", "", "-1:00", 600])
def test_bad_deadlines_are_refused(bad: object) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_deadline(bad)
    assert caught.value.field == "deadline"


def test_deadlines_are_normalised() -> None:
    assert parse_deadline("6:05") == "06:05"
    assert parse_deadline(" 23:59 ") == "23:59"


def test_baselines() -> None:
    assert parse_baseline("3x") == 3.0
    assert parse_baseline("2.5") == 2.5
    assert parse_baseline(4) == 4.0
    for bad in ("0.5x", "x3", "3y", True, "1001x"):
        with pytest.raises(InvalidInput) as caught:
            parse_baseline(bad)
        assert caught.value.field == "expect_baseline"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"expect_min": "10m", "expect_max": "1m"}, "expect_min"),
        ({"expect_max": "0s"}, "expect_max"),
        ({"expect_min": "soon"}, "expect_min"),
        ({"assert_fails": True}, "assert_fails"),
        ({"asserts": "rows >> 0"}, "assert"),
        ({"deadline": "25:00"}, "deadline"),
    ],
)
def test_expectations_that_cannot_hold_are_refused(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        expectations(**kwargs)  # type: ignore[arg-type]
    assert caught.value.field == field
