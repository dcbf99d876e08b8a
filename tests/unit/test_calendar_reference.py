"""Calendar arithmetic against a reference calendar's cases: business days as dates on the
job's wall clock, moves onto a DST change day, the last business day when it is a holiday,
n-th business days in a DST month, and moves across a year end both ways."""

from __future__ import annotations

from datetime import UTC, datetime

from cluster.timing.calendared import CalendarRule, Decision
from cluster.timing.calendars import Calendar, parse_dates, parse_weekdays
from cluster.timing.schedule import parse_schedule

# US-style holidays around the 2026/2027 and 2027/2028 year ends.
HOLIDAYS = ["2026-12-25", "2027-01-01", "2027-12-24", "2027-12-31", "2027-03-26"]
CAL = Calendar("ref", parse_weekdays("mon-fri"), parse_dates(HOLIDAYS))


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


def runs(rule: CalendarRule, expr: str, after: datetime, count: int, tz: str) -> list[Decision]:
    schedule = parse_schedule(expr, tz)
    found: list[Decision] = []
    cursor: Decision | datetime = after
    while len(found) < count:
        run, _ = rule.next_run(schedule, cursor)
        found.append(run)
        cursor = run
    return found


def test_a_late_evening_slot_belongs_to_its_local_date() -> None:
    # 23:30 in New York on 2026-12-24 is 04:30 UTC on the 25th (a holiday in UTC, not there).
    found = runs(CalendarRule(CAL, "skip"), "30 23 * * *", utc(2026, 12, 24, 12), 2,
                 "America/New_York")  # fmt: skip
    assert [d.slot for d in found] == [utc(2026, 12, 25, 4, 30), utc(2026, 12, 29, 4, 30)]


def test_a_slot_moved_onto_the_spring_forward_day_starts_after_the_gap() -> None:
    # Weekly on Saturday 02:30 in Berlin; every day but that Saturday is a business day.
    every_day = Calendar("all", frozenset(range(7)), parse_dates(["2027-03-27"]))
    (moved,) = runs(CalendarRule(every_day, "next-business-day"), "30 2 * * 6",
                    utc(2027, 3, 20, 12), 1, "Europe/Berlin")  # fmt: skip
    # 02:30 does not exist on 2027-03-28: the first valid instant after the gap, 03:00 CEST.
    assert moved.slot == utc(2027, 3, 27, 1, 30)
    assert moved.start == utc(2027, 3, 28, 1, 0)


def test_a_slot_moved_onto_the_fall_back_day_starts_at_the_first_occurrence() -> None:
    every_day = Calendar("all", frozenset(range(7)), parse_dates(["2027-10-30"]))
    (moved,) = runs(CalendarRule(every_day, "next-business-day"), "30 2 * * 6",
                    utc(2027, 10, 25), 1, "Europe/Berlin")  # fmt: skip
    assert moved.start == utc(2027, 10, 31, 0, 30)  # 02:30 CEST, the first of the two


def test_the_last_business_day_when_the_month_ends_on_a_holiday() -> None:
    found = runs(CalendarRule(CAL, business_day=-1), "0 17 * * *", utc(2027, 12, 1), 1,
                 "America/New_York")  # fmt: skip
    assert found[0].slot == utc(2027, 12, 30, 22)  # Friday the 31st is a holiday


def test_business_days_in_a_month_with_a_dst_change() -> None:
    rule = CalendarRule(CAL, business_day=-1)
    (last,) = runs(rule, "0 8 * * *", utc(2027, 3, 1), 1, "Europe/Berlin")
    assert last.slot == utc(2027, 3, 31, 6)  # CEST
    (first,) = runs(CalendarRule(CAL, business_day=1), "0 8 * * *", utc(2027, 3, 31, 7), 1,
                    "Europe/Berlin")  # fmt: skip
    assert first.slot == utc(2027, 4, 1, 6)
    # March 2027's 20th business day: the 26th is a holiday, so it is the 29th (CEST).
    (nth,) = runs(CalendarRule(CAL, business_day=20), "0 8 * * *", utc(2027, 3, 1), 1,
                  "Europe/Berlin")  # fmt: skip
    assert nth.slot == utc(2027, 3, 29, 6)


def test_moves_across_a_year_end_both_ways() -> None:
    # Dec 31 2027 (Friday) is a holiday: next business day Monday 2028-01-03.
    (forward,) = runs(CalendarRule(CAL, "next-business-day"), "0 9 31 12 *", utc(2027, 12, 1),
                      1, "Europe/Berlin")  # fmt: skip
    assert (forward.slot, forward.start) == (utc(2027, 12, 31, 8), utc(2028, 1, 3, 8))
    # Jan 1 2027 (Friday, a holiday): previous business day Thursday 2026-12-31.
    (back,) = runs(CalendarRule(CAL, "previous-business-day"), "0 9 1 1 *", utc(2026, 12, 1),
                   1, "America/New_York")  # fmt: skip
    assert (back.slot, back.start) == (utc(2027, 1, 1, 14), utc(2026, 12, 31, 14))
    # Dec 24 and 25 2027 (Fri holiday, Sat) both move back to Thursday the 23rd at 09:00:
    # the first runs, the second is recorded skipped (coalesced).
    rule = CalendarRule(CAL, "previous-business-day")
    schedule = parse_schedule("0 9 24,25 12 *", "UTC")
    run, _ = rule.next_run(schedule, utc(2027, 12, 1))
    assert (run.slot, run.start) == (utc(2027, 12, 24, 9), utc(2027, 12, 23, 9))
    _, skips = rule.next_run(schedule, run)
    assert [s.slot for s in skips][:1] == [utc(2027, 12, 25, 9)]
    assert "already starts" in (skips[0].reason or "")
