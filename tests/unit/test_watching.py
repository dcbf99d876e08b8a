"""Which slot a watch job's ping belongs to, and the slot expected after one
(cluster/timing/watching.py): early allowance, long runs, calendars and DST."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from cluster.timing.calendared import CalendarRule
from cluster.timing.calendars import Calendar
from cluster.timing.schedule import parse_schedule
from cluster.timing.watching import EARLY_S, after_slot, ping_run

T0 = datetime(2026, 1, 5, tzinfo=UTC)  # a Monday


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def slot_of(
    expr: str, moment: datetime, rule: CalendarRule | None = None, tz: str = "UTC"
) -> datetime | None:
    run = ping_run(parse_schedule(expr, tz), rule, moment)
    return None if run is None else run.slot


def test_a_ping_belongs_to_the_latest_slot_at_or_before_it() -> None:
    assert slot_of("* * * * *", at(60)) == at(60)
    assert slot_of("* * * * *", at(104)) == at(60)  # 16 s early is too early: 15 s at most
    assert slot_of("0 * * * *", at(3600 * 5 + 1800)) == at(3600 * 5)
    assert slot_of("0 3 1 * *", datetime(2026, 3, 20, tzinfo=UTC)) == datetime(
        2026, 3, 1, 3, tzinfo=UTC
    )


def test_a_ping_a_little_early_belongs_to_the_coming_slot() -> None:
    # An hourly cron on a host whose clock runs 20 s ahead: within EARLY_S.
    assert slot_of("0 * * * *", at(3600 - 20)) == at(3600)
    assert slot_of("0 * * * *", at(3600 - EARLY_S - 1)) == at(0)
    # Every 20 s: the allowance is a quarter of the gap (5 s), never half a period.
    assert slot_of("@every 20s", at(36)) == at(40)
    assert slot_of("@every 20s", at(34)) == at(20)


def test_the_slot_after_follows_the_schedule() -> None:
    schedule = parse_schedule("*/5 * * * *")
    assert after_slot(schedule, None, at(300)).slot == at(600)


def test_a_holiday_slot_expects_no_ping() -> None:
    # Weekdays at 06:00; Tuesday 6 January 2026 is excluded: Monday's run is followed by
    # Wednesday's, and a ping on the holiday belongs to Monday's slot (a late one).
    rule = CalendarRule(Calendar("ops", frozenset(range(5)), frozenset({date(2026, 1, 6)})))
    schedule = parse_schedule("0 6 * * *")
    monday, wednesday = datetime(2026, 1, 5, 6, tzinfo=UTC), datetime(2026, 1, 7, 6, tzinfo=UTC)
    assert after_slot(schedule, rule, monday).slot == wednesday
    assert slot_of("0 6 * * *", datetime(2026, 1, 6, 6, 1, tzinfo=UTC), rule) == monday


def test_dst_a_skipped_wall_time_is_awaited_at_the_first_instant_after_the_gap() -> None:
    # 02:30 Europe/Berlin does not exist on 29 March 2026: the slot is 03:00 CEST (01:00Z).
    schedule = parse_schedule("30 2 * * *", "Europe/Berlin")
    before = datetime(2026, 3, 28, 1, 30, tzinfo=UTC)  # 02:30 CET
    assert after_slot(schedule, None, before).slot == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    ping = datetime(2026, 3, 29, 1, 0, 5, tzinfo=UTC)
    assert slot_of("30 2 * * *", ping, tz="Europe/Berlin") == datetime(2026, 3, 29, 1, tzinfo=UTC)


def test_dst_a_repeated_wall_time_is_awaited_once() -> None:
    # 02:30 happens twice on 25 October 2026 in Berlin; `once` keeps the first (00:30Z).
    schedule = parse_schedule("30 2 * * *", "Europe/Berlin")
    first = datetime(2026, 10, 25, 0, 30, tzinfo=UTC)
    assert after_slot(schedule, None, first).slot == datetime(2026, 10, 26, 1, 30, tzinfo=UTC)
    # A ping at the second 02:30 (01:30Z) belongs to the one slot of that day.
    assert (
        slot_of("30 2 * * *", datetime(2026, 10, 25, 1, 31, tzinfo=UTC), tz="Europe/Berlin")
        == first
    )
