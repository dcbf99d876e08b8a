"""A slot's fate as one pure function of the job's time rules and the clock: on time, late
under each catch-up policy, claimed a moment early, moved or skipped by a calendar,
skipped or deferred by a window (also one added after the slot was planned), a one-off's
one slot (tests/unit/test_timeline.py: the explained timeline and the outage, walked
through the same function)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cluster.timing.calendared import CalendarRule, Window
from cluster.timing.calendars import Calendar, parse_dates
from cluster.timing.catchup import CatchUp
from cluster.timing.fate import NEVER, TimeRules, fate, on_time, skipped_between
from cluster.timing.schedule import parse_schedule

H = timedelta(hours=1)
NINE = datetime(2031, 6, 2, 9, 0, tzinfo=UTC)  # a Monday
HOURLY = parse_schedule("0 * * * *")
DAILY = parse_schedule("0 9 * * *")
OFFICE = Calendar("office", excluded=parse_dates(["2031-06-04"]))  # Mon-Fri, a Wednesday off


def rules(
    schedule: object = HOURLY, rule: CalendarRule | None = None, policy: str = "once", **kw: object
) -> TimeRules:
    catch_up = CatchUp(policy, float(kw.pop("grace_s", 60.0)), int(kw.pop("cap", 100)))  # type: ignore[arg-type]
    return TimeRules(schedule, rule, catch_up, **kw)  # type: ignore[arg-type]


def deferring(start: datetime, end: datetime) -> CalendarRule:
    return CalendarRule(windows=(Window(7, start, end, defer=True),))


def test_a_slot_on_time_runs_and_the_next_is_the_schedules() -> None:
    decided = fate(rules(), NINE, NINE)
    assert (decided.runs, decided.start, decided.next_slot, decided.skips) == (
        True, NINE, NINE + H, ()
    )  # fmt: skip
    after = fate(rules(), NINE, NINE + timedelta(minutes=5), ran=True)
    assert (after.next_slot, after.next_start, after.skips) == (NINE + H, NINE + H, ())


@pytest.mark.parametrize(
    ("policy", "runs", "next_slot", "skipped"),
    [
        ("once", False, NINE + 3 * H, [NINE + H, NINE + 2 * H]),
        ("backfill", True, NINE + H, []),
        ("skip", False, NINE + 4 * H, [NINE + H, NINE + 2 * H, NINE + 3 * H]),
    ],
)
def test_a_late_claim_follows_the_catch_up_policy(
    policy: str, runs: bool, next_slot: datetime, skipped: list[datetime]
) -> None:
    late = NINE + 3 * H + timedelta(minutes=30)  # 9:00 to 12:00 are due
    decided = fate(rules(policy=policy), NINE, late)
    assert (decided.runs, decided.next_slot) == (runs, next_slot if not runs else NINE + H)
    assert [p.slot for p in decided.skips] == skipped
    assert all(p.missed for p in decided.skips)
    if not runs:
        assert decided.reason is not None and decided.reason.startswith("missed by ")


def test_deferred_slots_claimed_a_moment_early_run_once_under_catch_up_once() -> None:
    end = NINE + 3 * H + timedelta(minutes=30)
    job = rules(rule=deferring(NINE + timedelta(minutes=30), end))
    decided = fate(job, NINE + H, end - timedelta(seconds=0.05))
    assert not decided.runs, "the window's slots are due together at its end"
    assert (decided.next_slot, decided.next_start, decided.next_origin) == (
        NINE + 3 * H, end, "window"
    )  # fmt: skip
    assert [p.slot for p in decided.skips] == [NINE + 2 * H]
    assert decided.reason is not None and decided.reason.startswith("deferred to ")
    assert fate(job, NINE + 3 * H, end).runs
    backfilled = fate(rules(rule=job.rule, policy="backfill"), NINE + H, end)
    assert backfilled.runs and backfilled.start == end


def test_a_window_added_after_the_slot_was_planned_skips_it_at_its_claim() -> None:
    job = rules(rule=CalendarRule(windows=(Window(3, NINE - H, NINE + 2 * H),)))
    decided = fate(job, NINE, NINE)
    assert not decided.runs and decided.reason is not None
    assert decided.reason.startswith("blackout window 3")
    assert [p.slot for p in decided.skips] == [NINE + H]
    assert decided.next_slot == NINE + 2 * H


def test_a_calendars_excluded_days_are_skipped_with_its_reason() -> None:
    job = rules(DAILY, CalendarRule(OFFICE))
    tuesday = NINE + timedelta(days=1)
    after = fate(job, tuesday, tuesday + H, ran=True)
    assert after.next_slot == tuesday + timedelta(days=2)
    (holiday,) = after.skips
    assert "2031-06-04 is a holiday" in holiday.reason and not holiday.missed
    friday = NINE + timedelta(days=4)
    weekend = fate(job, friday, friday + H, ran=True)
    assert [p.slot.day for p in weekend.skips] == [7, 8]
    assert skipped_between(DAILY, job.rule, friday, friday + timedelta(days=3)) == list(
        weekend.skips
    )


def test_a_one_off_runs_late_unless_skip_says_no() -> None:
    at = parse_schedule("@at 2031-06-02T09:00:00Z")
    assert fate(rules(at), NINE, NINE + H).runs
    done = fate(rules(at, policy="skip"), NINE, NINE + H)
    assert (done.runs, done.next_start) == (False, NEVER)
    assert done.reason is not None and "the one-off job is done" in done.reason
    assert on_time(rules(at), NINE).next_start == NEVER


def test_a_triggered_slot_runs_now_whatever_the_calendar_or_a_window_says() -> None:
    saturday = datetime(2031, 6, 7, 13, 21, 5, 123456, tzinfo=UTC)  # a trigger's slot
    weekdays = rules(DAILY, CalendarRule(OFFICE))
    triggered = fate(weekdays, saturday, saturday)
    assert (triggered.runs, triggered.start) == (True, saturday)
    assert triggered.next_slot == datetime(2031, 6, 9, 9, tzinfo=UTC)
    window = deferring(saturday - H, saturday + H)
    assert fate(rules(HOURLY, window), saturday, saturday).runs


def test_deferred_slots_of_a_jittered_job_run_once() -> None:
    end = NINE + 3 * H + timedelta(minutes=30)
    job = rules(
        rule=deferring(NINE + timedelta(minutes=30), end), tenant="t", name="j", jitter_s=600.0
    )
    first = fate(job, NINE + H, end + timedelta(seconds=30))
    assert not first.runs and first.next_slot == NINE + 3 * H
    assert end <= first.next_start < end + timedelta(seconds=600)
    assert fate(job, NINE + 3 * H, first.next_start).runs


@pytest.mark.parametrize("rule", [None, CalendarRule(OFFICE)], ids=["plain", "calendar"])
def test_a_long_outage_lists_the_newest_slots_and_the_oldest_listed_stands_for_the_rest(
    rule: CalendarRule | None,
) -> None:
    """Catch-up lists at most 1,000 slots of an outage (plus the runs a calendar keeps
    apart); the oldest listed record stands for every unlisted one from the first slot
    due (``since``: runs.skipped_from), so the listed, the covered and the run slot are
    every slot from the claimed one on."""
    late = NINE + 120 * 24 * H  # four months of hourly slots (and business hours) due
    decided = fate(rules(rule=rule), NINE, late)
    assert not decided.runs  # the claimed slot, NINE, is recorded skipped by its own write
    (stands,) = [p for p in decided.skips if p.since is not None]
    since = NINE + H
    assert (stands.since, stands.more, decided.skipped_more) == (since, stands.more, stands.more)
    assert f"; {stands.more} older slots, from {since.isoformat()}, were" in stands.reason
    assert len(decided.skips) <= 2100
    listed = {p.slot for p in decided.skips}
    every = [NINE + i * H for i in range(int((decided.next_slot - NINE) / H))]
    unlisted = [s for s in every if s not in listed and s != NINE]
    assert len(unlisted) == stands.more > 0
    assert all(stands.since <= s < stands.slot for s in unlisted)


def test_an_outage_one_slot_past_the_list_needs_no_stand_in() -> None:
    """The claimed slot is the only one the list leaves out: it has its own record, so no
    listed skip stands for anything."""
    late = NINE + 1001 * H + timedelta(minutes=5)  # NINE, 1,000 listed, then the newest runs
    decided = fate(rules(), NINE, late)
    assert not decided.runs and decided.next_slot == NINE + 1001 * H
    assert len(decided.skips) == 1000 and decided.skipped_more == 0
    assert all(p.since is None and "older slots" not in p.reason for p in decided.skips)
