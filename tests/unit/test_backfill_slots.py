"""The slots a backfill runs: those of the schedule in [from, to), oldest first, the DST
rules of the job applied (a skipped wall time shifted or left out, a repeated one once or
twice); empty, reversed and oversized ranges are refused."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cluster.errors import InvalidInput
from cluster.store.housekeeping.backfills import MAX_SLOTS, plan_slots
from cluster.timing.schedule import parse_schedule

BERLIN_DAILY = "30 2 * * *"


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def test_slots_are_half_open_and_oldest_first() -> None:
    slots = plan_slots(parse_schedule("@hourly"), utc(2026, 1, 1), utc(2026, 1, 1, 3))
    assert slots == [utc(2026, 1, 1, h) for h in range(3)]
    assert plan_slots(parse_schedule("@hourly"), utc(2026, 1, 1, 0, 0, 1), utc(2026, 1, 1, 2)) == [
        utc(2026, 1, 1, 1)
    ]


def test_spring_forward_shifts_or_skips_the_missing_wall_time() -> None:
    start, end = utc(2026, 3, 28), utc(2026, 3, 31)
    shifted = plan_slots(parse_schedule(BERLIN_DAILY, "Europe/Berlin"), start, end)
    # 02:30 does not exist on 29 March in Berlin: it fires at the change, 01:00 UTC.
    assert shifted == [utc(2026, 3, 28, 1, 30), utc(2026, 3, 29, 1), utc(2026, 3, 30, 0, 30)]
    skipping = parse_schedule(BERLIN_DAILY, "Europe/Berlin", dst_skipped="skip")
    assert plan_slots(skipping, start, end) == [utc(2026, 3, 28, 1, 30), utc(2026, 3, 30, 0, 30)]


def test_fall_back_runs_the_repeated_wall_time_once_or_twice() -> None:
    start, end = utc(2026, 10, 24, 12), utc(2026, 10, 25, 12)
    once = plan_slots(parse_schedule(BERLIN_DAILY, "Europe/Berlin"), start, end)
    assert once == [utc(2026, 10, 25, 0, 30)]
    twice = parse_schedule(BERLIN_DAILY, "Europe/Berlin", dst_repeated="twice")
    assert plan_slots(twice, start, end) == [utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 1, 30)]


@pytest.mark.parametrize(
    ("start", "end", "message"),
    [
        (utc(2026, 1, 2), utc(2026, 1, 1), "must be after --from"),
        (utc(2026, 1, 1), utc(2026, 1, 1), "must be after --from"),
        (utc(2026, 1, 1, 0, 1), utc(2026, 1, 1, 0, 59), "holds no slot"),
        (utc(2026, 1, 1), utc(2026, 1, 1) + timedelta(minutes=MAX_SLOTS + 1), "more than"),
    ],
)
def test_bad_ranges_are_refused(start: datetime, end: datetime, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        plan_slots(parse_schedule("@hourly" if "slot" in message else "* * * * *"), start, end)


def test_exactly_the_cap_is_accepted() -> None:
    start = utc(2026, 1, 1)
    slots = plan_slots(parse_schedule("* * * * *"), start, start + timedelta(minutes=MAX_SLOTS))
    assert len(slots) == MAX_SLOTS
