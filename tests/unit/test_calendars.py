"""Calendar arithmetic: business days across weekends, holidays, year ends and DST changes,
the n-th business day of a month from either end, weekday rules and ICS files."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
from dateutil.rrule import rrulestr  # type: ignore[import-untyped]

from cluster.errors import InvalidInput
from cluster.timing import icsdates
from cluster.timing.calendars import (
    Calendar,
    format_weekdays,
    is_business_day,
    local_date,
    next_business_day,
    nth_business_day,
    parse_dates,
    parse_weekdays,
    previous_business_day,
)
from cluster.timing.icsdates import ics_dates

# A reference business calendar: a US-style 2026/2027 year end.
HOLIDAYS = parse_dates(["2026-11-26", "2026-12-25", "2027-01-01", "2026-01-01", "2026-03-30"])
CAL = Calendar("us", parse_weekdays("mon-fri"), HOLIDAYS)


@pytest.mark.parametrize(
    ("day", "expected"),
    [
        (date(2026, 12, 24), True),
        (date(2026, 12, 25), False),  # a Friday holiday
        (date(2026, 12, 26), False),  # Saturday
        (date(2026, 12, 28), True),
        (date(2027, 1, 1), False),
        (date(2027, 1, 4), True),
    ],
)
def test_is_business_day(day: date, expected: bool) -> None:
    assert is_business_day(CAL, day) is expected


@pytest.mark.parametrize(
    ("day", "following", "preceding"),
    [
        (date(2026, 12, 24), date(2026, 12, 28), date(2026, 12, 23)),  # over a holiday+weekend
        (date(2026, 12, 31), date(2027, 1, 4), date(2026, 12, 30)),  # over the year end
        (date(2027, 1, 1), date(2027, 1, 4), date(2026, 12, 31)),
        (date(2027, 1, 4), date(2027, 1, 5), date(2026, 12, 31)),
        (date(2026, 11, 27), date(2026, 11, 30), date(2026, 11, 25)),  # Thanksgiving
    ],
)
def test_next_and_previous_business_day(day: date, following: date, preceding: date) -> None:
    assert next_business_day(CAL, day) == following
    assert previous_business_day(CAL, day) == preceding


@pytest.mark.parametrize(
    ("year", "month", "n", "expected"),
    [
        (2027, 1, 1, date(2027, 1, 4)),  # Jan 1 is a holiday, then a weekend
        (2026, 12, -1, date(2026, 12, 31)),
        (2026, 12, -2, date(2026, 12, 30)),
        (2026, 1, 1, date(2026, 1, 2)),
        (2026, 2, -1, date(2026, 2, 27)),
        (2026, 2, 20, date(2026, 2, 27)),
        (2026, 2, 21, None),  # February 2026 has 20 business days
        (2026, 2, -21, None),
        (2026, 3, -1, date(2026, 3, 31)),
        (2026, 5, -1, date(2026, 5, 29)),  # May 31 is a Sunday
    ],
)
def test_nth_business_day(year: int, month: int, n: int, expected: date | None) -> None:
    assert nth_business_day(CAL, year, month, n) == expected


def test_a_business_day_index_of_zero_is_refused() -> None:
    with pytest.raises(InvalidInput, match="business_day"):
        nth_business_day(CAL, 2026, 1, 0)


def test_the_business_day_of_a_slot_is_its_date_on_the_job_wall_clock() -> None:
    # 23:30 UTC on Saturday 2026-03-28 is already Sunday in Berlin; across the spring change
    # (2026-03-29) and in Auckland, a day ahead of UTC.
    assert local_date(datetime(2026, 3, 28, 23, 30, tzinfo=UTC), "Europe/Berlin") == date(
        2026, 3, 29
    )
    assert local_date(datetime(2026, 3, 29, 22, 30, tzinfo=UTC), "Europe/Berlin") == date(
        2026, 3, 30
    )
    assert local_date(datetime(2026, 12, 31, 11, 0, tzinfo=UTC), "Pacific/Auckland") == date(
        2027, 1, 1
    )
    assert not CAL.is_business_day(
        local_date(datetime(2026, 12, 31, 11, 0, tzinfo=UTC), "Pacific/Auckland")
    )


@pytest.mark.parametrize(
    ("text", "days"),
    [
        ("mon-fri", "mon,tue,wed,thu,fri"),
        ("sun-thu", "mon,tue,wed,thu,sun"),
        ("fri-mon", "mon,fri,sat,sun"),
        ("Mon, Wed,friday", "mon,wed,fri"),
        ("sat", "sat"),
    ],
)
def test_weekday_rules(text: str, days: str) -> None:
    assert format_weekdays(parse_weekdays(text)) == days


@pytest.mark.parametrize("text", ["", "mon-xyz", "funday", "mo"])
def test_bad_weekday_rules_are_refused(text: str) -> None:
    with pytest.raises(InvalidInput, match="weekdays"):
        parse_weekdays(text)


def test_bad_dates_are_refused() -> None:
    with pytest.raises(InvalidInput, match="dates"):
        parse_dates(["2026-02-30"])


def test_a_calendar_round_trips_through_its_json_text() -> None:
    assert Calendar.from_json(CAL.to_json()) == CAL


ICS = """BEGIN:VCALENDAR
VERSION:2.0
PRODID:-//Pulse//test//EN
BEGIN:VEVENT
UID:xmas@test
DTSTART;VALUE=DATE:20261224
DTEND;VALUE=DATE:20261227
SUMMARY:Christmas
END:VEVENT
BEGIN:VEVENT
UID:ny@test
DTSTART;VALUE=DATE:20250101
RRULE:FREQ=YEARLY
EXDATE;VALUE=DATE:20280101
SUMMARY:New Year
END:VEVENT
BEGIN:VEVENT
UID:offsite@test
DTSTART;TZID=Europe/Berlin:20260601T090000
DTEND;TZID=Europe/Berlin:20260601T170000
SUMMARY:Offsite
END:VEVENT
END:VCALENDAR
"""


def test_ics_events_cover_their_dates_and_recurrences() -> None:
    dates = ics_dates(ICS)
    assert {date(2026, 12, 24), date(2026, 12, 25), date(2026, 12, 26)} <= dates
    assert date(2026, 12, 27) not in dates  # DTEND is exclusive
    assert {date(2025, 1, 1), date(2027, 1, 1), date(2029, 1, 1)} <= dates
    assert date(2028, 1, 1) not in dates  # EXDATE
    assert date(2026, 6, 1) in dates


@pytest.mark.parametrize(
    "text",
    ["not a calendar", "", "BEGIN:VCALENDAR\nBEGIN:VEVENT\nSUMMARY:x\nEND:VEVENT\nEND:VCALENDAR\n"],
)
def test_unparsable_ics_is_refused_in_one_line(text: str) -> None:
    with pytest.raises(InvalidInput, match="ics") as caught:
        ics_dates(text)
    assert "\n" not in str(caught.value)


def test_a_calendar_of_weekday_rules_and_dates_in_any_form() -> None:
    built = Calendar.of("us", "mon-fri", ["2026-12-25", date(2027, 1, 1)])
    assert built == Calendar("us", parse_weekdays("mon-fri"), frozenset(HOLIDAYS) - {
        date(2026, 11, 26), date(2026, 1, 1), date(2026, 3, 30)
    })  # fmt: skip
    assert not built.is_business_day(datetime(2026, 12, 25, 23, 0, tzinfo=UTC))
    sun_thu = Calendar.of("il", "sun-thu")
    assert next_business_day(sun_thu, date(2026, 12, 3)) == date(2026, 12, 6)  # Thu -> Sun
    assert nth_business_day(sun_thu, 2026, 12, -1) == date(2026, 12, 31)


def _feed(*events: str) -> str:
    body = "".join(
        f"BEGIN:VEVENT\nUID:{n}@test\nSUMMARY:e{n}\n{event}\nEND:VEVENT\n"
        for n, event in enumerate(events)
    )
    return f"BEGIN:VCALENDAR\nVERSION:2.0\nPRODID:-//Pulse//test//EN\n{body}END:VCALENDAR\n"


def test_an_ics_feed_walks_its_rules_within_one_budget_per_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Many events each under the walk limit: a feed of them is bounded like one rule."""
    monkeypatch.setattr(icsdates, "MAX_WALK", 2000)
    monthly = "DTSTART;VALUE=DATE:20000101\nRRULE:FREQ=MONTHLY"  # 732 occurrences to 2060
    assert len(ics_dates(_feed(monthly, monthly))) == 732
    with pytest.raises(InvalidInput, match="recur over more than 2000 dates"):
        ics_dates(_feed(monthly, monthly, monthly))


def test_an_ics_rule_is_walked_from_the_horizon_not_from_its_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(icsdates, "MAX_WALK", 5000)
    rules = ["FREQ=DAILY", "FREQ=DAILY;INTERVAL=3", "FREQ=WEEKLY;INTERVAL=2", "FREQ=YEARLY",
             "FREQ=MONTHLY;INTERVAL=5", "FREQ=HOURLY;INTERVAL=7;BYHOUR=9"]  # fmt: skip
    for rule in rules:
        old = f"DTSTART;VALUE=DATE:19500103\nRRULE:{rule};UNTIL=20101231"
        dates = ics_dates(_feed(old))
        walked = rrulestr(f"RRULE:{rule};UNTIL=20101231", dtstart=datetime(1950, 1, 3))
        expected = {d.date() for d in walked if d >= datetime(2000, 1, 1)}
        assert dates == expected, rule


def test_a_long_event_recurring_daily_stops_at_the_cap_on_dates() -> None:
    """A year-long event every day would make millions of dates before any cap on the set."""
    yearly = "DTSTART;VALUE=DATE:20000101\nDTEND;VALUE=DATE:20001231\nRRULE:FREQ=DAILY"
    with pytest.raises(InvalidInput, match="more than 200000 dates before 2060"):
        ics_dates(_feed(yearly))
