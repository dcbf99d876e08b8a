"""Slots against a calendar: skipped, moved to the next or previous business day (their
identity kept, coalesced when they would run twice), business-day schedules, DST zones."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cluster.errors import InvalidInput
from cluster.timing.calendared import CalendarRule, Decision, Window
from cluster.timing.calendars import Calendar, parse_dates, parse_weekdays
from cluster.timing.schedule import parse_schedule

CAL = Calendar("us", parse_weekdays("mon-fri"), parse_dates(["2026-12-25", "2027-01-01"]))


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


def walk(
    rule: CalendarRule, expr: str, after: datetime, runs: int, tz: str = "UTC"
) -> list[Decision]:
    schedule = parse_schedule(expr, tz)
    found: list[Decision] = []
    cursor: Decision | datetime = after
    for _ in range(runs):
        run, skips = rule.next_run(schedule, cursor)
        found += [*skips, run]
        cursor = run
    return found


def test_skip_records_the_holiday_and_the_weekend() -> None:
    found = walk(CalendarRule(CAL, "skip"), "0 9 * * *", utc(2026, 12, 24, 10), 1)
    assert [(d.slot.day, d.runs) for d in found] == [
        (25, False),
        (26, False),
        (27, False),
        (28, True),
    ]
    assert "2026-12-25 is a holiday" in (found[0].reason or "")
    assert "not a business weekday" in (found[1].reason or "")


def test_a_daily_slot_moved_onto_a_day_with_its_own_slot_is_skipped() -> None:
    found = walk(CalendarRule(CAL, "next-business-day"), "0 9 * * *", utc(2026, 12, 24, 10), 1)
    assert [(d.slot.day, d.runs) for d in found] == [
        (25, False),
        (26, False),
        (27, False),
        (28, True),
    ]
    assert "has slots of its own" in (found[0].reason or "")
    assert not found[-1].moved


def test_a_monthly_slot_moves_to_the_next_business_day_keeping_its_identity() -> None:
    # The 25th of December 2026 is a Friday holiday: it starts Monday the 28th at 09:00.
    found = walk(CalendarRule(CAL, "next-business-day"), "0 9 25 * *", utc(2026, 12, 1), 2)
    moved = found[0]
    assert moved.runs and moved.moved
    assert moved.slot == utc(2026, 12, 25, 9) and moved.start == utc(2026, 12, 28, 9)
    assert found[1].slot == utc(2027, 1, 25, 9) and not found[1].moved


def test_previous_business_day_starts_before_the_nominal_slot() -> None:
    found = walk(CalendarRule(CAL, "previous-business-day"), "0 9 1 * *", utc(2026, 12, 15), 1)
    assert found[0].slot == utc(2027, 1, 1, 9) and found[0].start == utc(2026, 12, 31, 9)


def test_two_slots_moved_onto_the_same_start_run_once() -> None:
    # The 26th and 27th (a weekend) both move to Monday the 28th at 09:00.
    found = walk(CalendarRule(CAL, "next-business-day"), "0 9 26,27 12 *", utc(2026, 12, 1), 1)
    runs = [d for d in found if d.runs]
    assert [(d.slot.day, d.start.day) for d in runs] == [(26, 28)]
    after, skips = CalendarRule(CAL, "next-business-day").next_run(
        parse_schedule("0 9 26,27 12 *"), runs[0]
    )
    assert skips[0].slot == utc(2026, 12, 27, 9) and "already starts" in (skips[0].reason or "")
    # In 2027 the 26th is a Sunday, moved onto Monday the 27th, which has its own slot.
    assert [s.slot for s in skips[1:]] == [utc(2027, 12, 26, 9)]
    assert after.slot == utc(2027, 12, 27, 9) and not after.moved


def test_moved_slots_of_a_group_run_in_start_order() -> None:
    rule = CalendarRule(CAL, "next-business-day")
    found = walk(rule, "0 9,17 26,27 12 *", utc(2026, 12, 1), 2)
    runs = [d for d in found if d.runs]
    assert [d.start for d in runs] == [utc(2026, 12, 28, 9), utc(2026, 12, 28, 17)]
    assert [d.slot for d in runs] == [utc(2026, 12, 26, 9), utc(2026, 12, 26, 17)]


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (1, [utc(2027, 1, 4, 8), utc(2027, 2, 1, 8)]),
        (-1, [utc(2026, 12, 31, 8), utc(2027, 1, 29, 8)]),
    ],
)
def test_business_day_schedules(n: int, expected: list[datetime]) -> None:
    found = walk(CalendarRule(CAL, business_day=n), "0 8 * * *", utc(2026, 12, 20), 2)
    assert [d.slot for d in found if d.runs] == expected


def test_business_days_are_dates_on_the_job_wall_clock_across_dst() -> None:
    # 00:30 in Berlin on Monday 2026-03-30 is Sunday 22:30 UTC: a business day there.
    rule = CalendarRule(CAL, "skip")
    found = walk(rule, "30 0 * * *", utc(2026, 3, 27, 12), 1, tz="Europe/Berlin")
    assert [d.runs for d in found] == [False, False, True]
    assert found[-1].slot == utc(2026, 3, 29, 22, 30)


def test_a_schedule_the_calendar_never_lets_run_is_refused() -> None:
    with pytest.raises(InvalidInput, match="business_day"):
        CalendarRule(CAL, business_day=1).next_run(parse_schedule("0 9 31 * *"), utc(2026, 1, 1))
    with pytest.raises(InvalidInput, match="business_day"):
        CalendarRule(CAL, business_day=0)


def test_a_blackout_window_skips_or_defers_its_slots() -> None:
    window = Window(7, utc(2026, 12, 1, 10), utc(2026, 12, 1, 13))
    skipping = CalendarRule(windows=(window,))
    found = walk(skipping, "0 * * * *", utc(2026, 12, 1, 8, 30), 3)
    assert [(d.slot.hour, d.runs) for d in found] == [
        (9, True),
        (10, False),
        (11, False),
        (12, False),
        (13, True),
        (14, True),
    ]
    assert "blackout window 7" in (found[1].reason or "")
    deferring = CalendarRule(windows=(window._replace(defer=True),))
    runs = walk(deferring, "0 * * * *", utc(2026, 12, 1, 8, 30), 5)
    assert [(d.slot.hour, d.start.hour, d.deferred) for d in runs] == [
        (9, 9, False),
        (10, 13, True),
        (11, 13, True),
        (12, 13, True),
        (13, 13, False),
    ]


def test_a_rule_round_trips_through_its_json_text_with_windows() -> None:
    rule = CalendarRule(
        CAL, "next-business-day", None, (Window(1, utc(2026, 1, 1), utc(2026, 1, 2), True),)
    )
    assert CalendarRule.from_json(rule.to_json()) == rule
    windows_only = CalendarRule(windows=rule.windows)
    assert CalendarRule.from_json(windows_only.to_json()) == windows_only


def report() -> None:
    """A job function for the registry test."""


def test_registry_decorators_take_the_calendar_options() -> None:
    from cluster.jobs.registry import Registry

    registry = Registry("acme")
    registry.cron("0 18 * * *", calendar="us", business_day=-1)(report)
    registry.every("1h", name="hourly", calendar="us", on_excluded="next-business-day")(report)
    specs = {s.name: s for s in registry.specs()}
    assert (specs["report"].calendar, specs["report"].business_day) == ("us", -1)
    assert specs["hourly"].on_excluded == "next-business-day"
    with pytest.raises(InvalidInput, match="business_day"):
        Registry().cron("0 9 * * *", name="bad", calendar="us", business_day=0)(report)


def test_a_slot_kept_under_a_new_timing_walks_its_groups_slots_after_the_change() -> None:
    """A 09:00 daily slot of the 25th (a holiday, moved to the next business day) kept by a
    new timing written at 10:00, hourly: the walk from it meets the new timing's slots of
    the holiday after the change, each skipped (the 28th has slots of its own), then runs
    on the 28th. Before, the group of a slot the new timing does not have yielded its
    runs only, and those skips were never recorded."""
    rule = CalendarRule(CAL, "next-business-day")
    hourly = parse_schedule("0 * * * *").starting(utc(2026, 12, 25, 10))
    kept = Decision(utc(2026, 12, 25, 9), utc(2026, 12, 28, 9), True)
    run, skips = rule.next_run(hourly, kept)
    assert [d.slot for d in skips][:2] == [utc(2026, 12, 25, 11), utc(2026, 12, 25, 12)]
    assert all(not d.runs for d in skips) and skips[-1].slot.day == 27
    assert run.slot == utc(2026, 12, 28, 0)
