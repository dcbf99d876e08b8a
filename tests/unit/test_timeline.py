"""The explained timeline: DST notes on repeated and skipped wall times, the calendar's and
a window's decisions, jitter; and what each catch-up policy does after an outage."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest

from cluster.timing.calendared import CalendarRule, Window
from cluster.timing.calendars import Calendar, parse_dates
from cluster.timing.catchup import CatchUp
from cluster.timing.fate import TimeRules
from cluster.timing.schedule import parse_schedule
from cluster.timing.timeline import expected, explain, outage


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


def test_explain_names_the_dst_rule_of_each_slot() -> None:
    berlin = parse_schedule("30 2 * * *", "Europe/Berlin")
    spring = explain(berlin, None, utc(2026, 3, 28, 12), 1)
    assert "first instant after the DST gap (dst_skipped=shift)" in spring[0].notes[0]
    autumn = explain(berlin, None, utc(2026, 10, 24, 12), 1)
    assert "repeated hour: its first occurrence (dst_repeated=once)" in autumn[0].notes[0]
    assert explain(berlin, None, utc(2026, 6, 1), 1)[0].notes == (
        "Mon 2026-06-01 02:30:00 Europe/Berlin (UTC+02:00)",
    )


def test_explain_shows_calendar_window_and_jitter_decisions() -> None:
    calendar = Calendar("us", excluded=parse_dates(["2026-12-25"]))
    window = Window(3, utc(2026, 12, 28, 8), utc(2026, 12, 28, 10), defer=True)
    rule = CalendarRule(calendar, "skip", None, (window,))
    steps = explain(
        parse_schedule("0 9 * * *"), rule, utc(2026, 12, 24, 10), 2,
        tenant="t", name="j", jitter_s=60.0,
    )  # fmt: skip
    assert [(s.slot.day, s.action) for s in steps] == [
        (25, "skipped"), (26, "skipped"), (27, "skipped"), (28, "deferred"), (29, "runs")
    ]  # fmt: skip
    assert any("is a holiday" in note for note in steps[0].notes)
    assert any("blackout window 3" in note for note in steps[3].notes)
    assert steps[3].start is not None and steps[3].start >= utc(2026, 12, 28, 10)
    assert any(note.startswith("jitter +") for note in steps[4].notes)


@pytest.mark.parametrize(
    ("policy", "actions"),
    [
        ("once", ["missed", "missed", "missed", "catch-up"]),
        ("backfill", ["backfill", "backfill", "backfill", "backfill"]),
        ("skip", ["missed", "missed", "missed", "catch-up"]),
    ],
)
def test_outage_shows_what_each_catch_up_policy_does(policy: str, actions: list[str]) -> None:
    grace = 1800.0  # the 03:00 slot is 30 minutes late at 03:30
    steps = outage(
        parse_schedule("0 * * * *"), None, CatchUp(policy, grace, 100),  # type: ignore[arg-type]
        utc(2026, 1, 1), utc(2026, 1, 1, 3, 30),
    )  # fmt: skip
    assert [s.action for s in steps] == actions
    assert all(s.start == utc(2026, 1, 1, 3, 30) for s in steps if s.action != "missed")


H = timedelta(hours=1)
NINE = datetime(2031, 6, 2, 9, 0, tzinfo=UTC)  # a Monday
OFFICE = Calendar("office", excluded=parse_dates(["2031-06-04"]))


def test_explain_agrees_with_the_fate_of_deferred_slots() -> None:
    end = NINE + 3 * H + timedelta(minutes=30)
    steps = explain(
        parse_schedule("0 * * * *"),
        CalendarRule(windows=(Window(7, NINE + timedelta(minutes=30), end, defer=True),)),
        NINE - H,
        3,
    )
    assert [(s.slot, s.action) for s in steps] == [
        (NINE, "runs"), (NINE + H, "missed"), (NINE + 2 * H, "missed"),
        (NINE + 3 * H, "deferred"), (NINE + 4 * H, "runs"),
    ]  # fmt: skip
    assert steps[3].start == end


def test_an_outage_lists_nothing_after_its_end() -> None:
    thursday, friday_noon = NINE + timedelta(days=3), NINE + timedelta(days=4, hours=3)
    steps = outage(
        parse_schedule("0 9 * * *"), CalendarRule(OFFICE), CatchUp(), thursday - H, friday_noon
    )
    assert [(s.slot.day, s.action) for s in steps] == [(5, "missed"), (6, "catch-up")]
    assert all(s.slot <= friday_noon for s in steps)


def test_expected_gives_every_slot_of_a_range_once_with_its_fate() -> None:
    hourly = parse_schedule("0 * * * *")
    windows = (
        Window(1, NINE + H, NINE + 3 * H),  # 10:00 and 11:00 skipped
        Window(2, NINE + 5 * H + timedelta(minutes=30), NINE + 8 * H, defer=True),
    )
    rules = TimeRules(hourly, CalendarRule(OFFICE, windows=windows))
    after, until = NINE - timedelta(seconds=1), NINE + 3 * 24 * H
    steps = list(expected(rules, after, until))
    assert [s.slot for s in steps] == list(itertools.islice(hourly.iter_after(after), len(steps)))
    assert steps[-1].slot == until and len(steps) == 3 * 24 + 1
    actions = {s.slot: s.action for s in steps}
    assert [actions[NINE + k * H] for k in range(10)] == [
        "runs", "skipped", "skipped", "runs", "runs", "runs", "missed", "missed", "runs", "runs"
    ]  # fmt: skip
    holiday = [s for s in steps if s.slot.day == 4]
    assert holiday and all(s.action == "skipped" for s in holiday)
