"""Schedules across DST changes: repeated wall times (once/twice), skipped ones (shift/skip).

2026 transitions used below (UTC instant, local wall clock):
  Europe/Berlin        spring 03-29 01:00 (02:00 CET -> 03:00 CEST), autumn 10-25 01:00
                       (03:00 CEST -> 02:00 CET)
  America/New_York     spring 03-08 07:00 (02:00 -> 03:00), autumn 11-01 06:00 (02:00 -> 01:00)
  Australia/Lord_Howe  spring 10-03 15:30 (02:00 -> 02:30), autumn 04-04 15:00 (02:00 -> 01:30):
                       a 30-minute shift
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from cluster.errors import InvalidInput
from cluster.timing.schedule import parse_schedule


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


TRANSITIONS = {  # zone -> (spring instant, autumn instant)
    "Europe/Berlin": (utc(2026, 3, 29, 1), utc(2026, 10, 25, 1)),
    "America/New_York": (utc(2026, 3, 8, 7), utc(2026, 11, 1, 6)),
    "Australia/Lord_Howe": (utc(2026, 10, 3, 15, 30), utc(2026, 4, 4, 15)),
}

HISTORIC = [  # older rules: Berlin's 1945 double summer time, Lord Howe's 1 h shifts
    ("Europe/Berlin", utc(1945, 5, 24)),
    ("Europe/Berlin", utc(1945, 9, 24)),
    ("Australia/Lord_Howe", utc(1981, 2, 28, 14)),
    ("Australia/Lord_Howe", utc(1982, 3, 6, 14, 30)),
    ("Australia/Lord_Howe", utc(1985, 10, 26, 15, 30)),
]


def slots(expr: str, tz: str, after: datetime, n: int, **options: str) -> list[datetime]:
    return parse_schedule(expr, tz, **options).next_n(after, n)  # type: ignore[arg-type]


# --- spring forward: skipped wall times ------------------------------------------------------

SPRING = [
    # (zone, expr, after, shift result, skip result)
    (
        "Europe/Berlin",
        "30 2 * * *",
        utc(2026, 3, 28, 12),
        [utc(2026, 3, 29, 1), utc(2026, 3, 30, 0, 30)],
        [utc(2026, 3, 30, 0, 30), utc(2026, 3, 31, 0, 30)],
    ),
    (
        "America/New_York",
        "30 2 * * *",
        utc(2026, 3, 7, 12),
        [utc(2026, 3, 8, 7), utc(2026, 3, 9, 6, 30)],
        [utc(2026, 3, 9, 6, 30), utc(2026, 3, 10, 6, 30)],
    ),
    (
        "Australia/Lord_Howe",
        "15 2 * * *",
        utc(2026, 10, 3),
        [utc(2026, 10, 3, 15, 30), utc(2026, 10, 4, 15, 15)],
        [utc(2026, 10, 4, 15, 15), utc(2026, 10, 5, 15, 15)],
    ),
]


@pytest.mark.parametrize(("tz", "expr", "after", "shifted", "skipped"), SPRING)
def test_spring_gap(
    tz: str, expr: str, after: datetime, shifted: list[datetime], skipped: list[datetime]
) -> None:
    assert slots(expr, tz, after, 2) == shifted
    assert slots(expr, tz, after, 2, dst_skipped="shift") == shifted
    assert slots(expr, tz, after, 2, dst_skipped="skip") == skipped


def test_shift_lands_on_the_first_valid_instant() -> None:
    slot = parse_schedule("30 2 * * *", "Europe/Berlin").next_after(utc(2026, 3, 28, 12))
    local = slot.astimezone(ZoneInfo("Europe/Berlin"))
    assert (local.hour, local.minute, local.utcoffset()) == (3, 0, timedelta(hours=2))


def test_gap_times_shifted_onto_one_instant_fire_once() -> None:
    # 02:00, 02:15, 02:30, 02:45 all shift to 03:00 CEST, which is itself a slot.
    berlin = slots("*/15 2-3 * * *", "Europe/Berlin", utc(2026, 3, 29, 0, 30), 3)
    assert berlin == [utc(2026, 3, 29, 1), utc(2026, 3, 29, 1, 15), utc(2026, 3, 29, 1, 30)]
    skip = slots("*/15 2-3 * * *", "Europe/Berlin", utc(2026, 3, 29, 0, 30), 2, dst_skipped="skip")
    assert skip == [utc(2026, 3, 29, 1), utc(2026, 3, 29, 1, 15)]  # only the real 03:00, 03:15


def test_every_minute_through_the_gap_fires_every_utc_minute_once() -> None:
    start, end = utc(2026, 3, 29, 0), utc(2026, 3, 29, 2)
    for option in ("shift", "skip"):
        schedule = parse_schedule("* * * * *", "Europe/Berlin", dst_skipped=option)
        got = schedule.slots_between(start, end, 1000)
        assert got == [start + timedelta(minutes=i) for i in range(121)]


# --- fall back: repeated wall times -----------------------------------------------------------

AUTUMN = [
    # (zone, expr, after, first occurrence, second occurrence, next day's slot)
    (
        "Europe/Berlin",
        "30 2 * * *",
        utc(2026, 10, 24, 12),
        utc(2026, 10, 25, 0, 30),
        utc(2026, 10, 25, 1, 30),
        utc(2026, 10, 26, 1, 30),
    ),
    (
        "America/New_York",
        "30 1 * * *",
        utc(2026, 10, 31, 12),
        utc(2026, 11, 1, 5, 30),
        utc(2026, 11, 1, 6, 30),
        utc(2026, 11, 2, 6, 30),
    ),
    (
        "Australia/Lord_Howe",
        "45 1 * * *",
        utc(2026, 4, 4),
        utc(2026, 4, 4, 14, 45),
        utc(2026, 4, 4, 15, 15),
        utc(2026, 4, 5, 15, 15),
    ),
]


@pytest.mark.parametrize(("tz", "expr", "after", "first", "second", "next_day"), AUTUMN)
def test_autumn_repeat(
    tz: str, expr: str, after: datetime, first: datetime, second: datetime, next_day: datetime
) -> None:
    assert slots(expr, tz, after, 2) == [first, next_day]
    assert slots(expr, tz, after, 2, dst_repeated="once") == [first, next_day]
    assert slots(expr, tz, after, 3, dst_repeated="twice") == [first, second, next_day]


@pytest.mark.parametrize(("tz", "expr", "after", "first", "second", "next_day"), AUTUMN)
def test_autumn_repeat_from_inside_the_repeated_hour(
    tz: str, expr: str, after: datetime, first: datetime, second: datetime, next_day: datetime
) -> None:
    once = parse_schedule(expr, tz)
    twice = parse_schedule(expr, tz, dst_repeated="twice")
    between = first + (second - first) / 2  # after the first pass's slot, before the second's
    assert twice.next_after(between) == second
    assert once.next_after(between) == next_day
    assert twice.next_after(first) == second
    assert twice.next_after(second) == next_day
    # In the second pass, a little before the repeated slot: only "twice" fires it.
    assert twice.next_after(second - timedelta(minutes=1)) == second
    assert once.next_after(second - timedelta(minutes=1)) == next_day


def test_every_minute_through_the_repeat() -> None:
    start, end = utc(2026, 10, 25, 0), utc(2026, 10, 25, 2, 59)
    twice = parse_schedule("* * * * *", "Europe/Berlin", dst_repeated="twice")
    assert twice.slots_between(start, end, 1000) == [
        start + timedelta(minutes=i) for i in range(180)
    ]
    once = parse_schedule("* * * * *", "Europe/Berlin").slots_between(start, end, 1000)
    second_pass = [utc(2026, 10, 25, 1) + timedelta(minutes=i) for i in range(60)]
    assert once == [s for s in twice.slots_between(start, end, 1000) if s not in second_pass]


def test_every_is_untouched_by_dst() -> None:
    for tz, (spring, autumn) in TRANSITIONS.items():
        for change in (spring, autumn):
            got = slots("@every 30m", tz, change - timedelta(hours=2), 8)
            assert [b - a for a, b in itertools.pairwise(got)] == [timedelta(minutes=30)] * 7


def test_unknown_zone_is_rejected() -> None:
    with pytest.raises(InvalidInput) as info:
        parse_schedule("0 3 * * *", "Europe/Berlim")
    assert info.value.field == "tz"


# --- properties against an independent reference -------------------------------------------


def gap_end(zone: ZoneInfo, wall: datetime) -> datetime:
    """The first whole-second instant whose wall clock is later than ``wall`` (bisection)."""
    low = int(wall.replace(tzinfo=UTC).timestamp()) - 26 * 3600
    high = low + 52 * 3600
    while high - low > 1:
        middle = (low + high) // 2
        if datetime.fromtimestamp(middle, zone).replace(tzinfo=None) > wall:
            high = middle
        else:
            low = middle
    return datetime.fromtimestamp(high, UTC)


def reference(
    expr: str, seconds: bool, tz: str, repeated: str, skipped: str, start: datetime, end: datetime
) -> list[datetime]:
    """Slots in [start, end], from croniter's naive wall times and round-tripping each fold."""
    zone = ZoneInfo(tz)
    # Gap wall times map to the instant the gap ends: look at the offsets a little before too.
    moments = (start - timedelta(hours=3), start, end, end + timedelta(hours=3))
    offsets = [moment.astimezone(zone).utcoffset() or timedelta(0) for moment in moments]
    low = start.replace(tzinfo=None) + min(offsets) - timedelta(seconds=1)
    high = end.replace(tzinfo=None) + max(offsets)
    walls = croniter(expr, low, second_at_beginning=seconds)
    found: set[datetime] = set()
    while (wall := walls.get_next(datetime)) <= high:
        real = sorted(
            {
                instant
                for fold in (0, 1)
                if (instant := wall.replace(tzinfo=zone, fold=fold).astimezone(UTC))
                .astimezone(zone)
                .replace(tzinfo=None)
                == wall
            }
        )
        if real:
            found.update(real if repeated == "twice" else real[:1])
        elif skipped == "shift":
            found.add(gap_end(zone, wall))
    return sorted(s for s in found if start <= s <= end)


DST_SECONDS = st.sampled_from(["0", "*/20", "10,40"])
DST_MINUTES = st.sampled_from(["*", "*/5", "0", "30", "0,15,30,45", "*/7", "59", "10-40/10"])
DST_HOURS = st.sampled_from(["*", "1", "2", "3", "1-3", "0-4", "*/2", "2,3"])
DST_DAYS = st.sampled_from(
    ["* * *", "* * *", "* * *", "1-10 * *", "* * 0", "L * *", "* 3,4,10,11 *"]
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    zone_and_change=st.one_of(
        st.sampled_from(
            [(tz, change) for tz, changes in TRANSITIONS.items() for change in changes] + HISTORIC
        ),
        st.tuples(  # anywhere at all
            st.sampled_from(sorted(TRANSITIONS)),
            st.datetimes(datetime(1940, 1, 1), datetime(2040, 1, 1), timezones=st.just(UTC)),
        ),
    ),
    seconds=st.one_of(st.none(), DST_SECONDS),
    minutes=DST_MINUTES,
    hours=DST_HOURS,
    days=DST_DAYS,
    lead_s=st.integers(min_value=-4 * 3600, max_value=2 * 3600),
    repeated=st.sampled_from(["once", "twice"]),
    skipped=st.sampled_from(["shift", "skip"]),
)
def test_slots_equal_the_reference_across_dst(
    zone_and_change: tuple[str, datetime],
    seconds: str | None,
    minutes: str,
    hours: str,
    days: str,
    lead_s: int,
    repeated: str,
    skipped: str,
) -> None:
    tz, change = zone_and_change
    expr = " ".join(f for f in (seconds, minutes, hours, days) if f is not None)
    try:
        schedule = parse_schedule(expr, tz, repeated, skipped)  # type: ignore[arg-type]
    except InvalidInput:
        assume(False)
        raise
    start = change + timedelta(seconds=lead_s)
    end = start + timedelta(hours=3)
    got = schedule.slots_between(start, end, 100_000)
    assert got == reference(expr, seconds is not None, tz, repeated, skipped, start, end)
    assert all(a < b for a, b in itertools.pairwise(got)), "strictly increasing"
    zone = ZoneInfo(tz)
    for slot in got:
        wall = slot.astimezone(zone).replace(tzinfo=None)
        matches = croniter.match(expr, wall, second_at_beginning=seconds is not None)
        gap_ends_here = (slot - timedelta(seconds=1)).astimezone(zone).utcoffset() != (
            slot.astimezone(zone).utcoffset()
        )
        assert matches or (skipped == "shift" and gap_ends_here), slot
    # Walking slot by slot from before the window gives the same sequence.
    chained, cursor = [], start - timedelta(microseconds=1)
    for _ in got:
        cursor = schedule.next_after(cursor)
        chained.append(cursor)
    assert chained == got
