"""Catch-up plans for missed slots: skip / once / backfill, record caps, long outages."""

from __future__ import annotations

import itertools
import math
import time
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster.errors import InvalidInput
from cluster.timing.catchup import CatchUp, CatchUpPlan, parse_catch_up, plan_catchup
from cluster.timing.schedule import Schedule, parse_schedule

T = datetime(2026, 5, 13, 10, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
EVERY_MINUTE = ["@every 1m", "* * * * *", "0 * * * * *"]  # the same slots, three ways


def minutes(*offsets: int) -> tuple[datetime, ...]:
    return tuple(T + MINUTE * offset for offset in offsets)


# --- the policy value --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "policy"), [("skip", "skip"), (" Once ", "once"), ("BACKFILL", "backfill")]
)
def test_parse_catch_up(raw: str, policy: str) -> None:
    assert parse_catch_up(raw) == policy


@pytest.mark.parametrize("bad", ["", "all", "twice", None, 1])
def test_parse_catch_up_rejects(bad: object) -> None:
    with pytest.raises(InvalidInput) as info:
        parse_catch_up(bad)  # type: ignore[arg-type]
    assert info.value.field == "catch_up"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"policy": "later"}, "catch_up"),
        ({"grace_s": -1.0}, "grace"),
        ({"grace_s": math.nan}, "grace"),
        ({"grace_s": math.inf}, "grace"),
        ({"grace_s": True}, "grace"),
        ({"grace_s": "60"}, "grace"),
        ({"max_backfill": 0}, "max_backfill"),
        ({"max_backfill": 2.5}, "max_backfill"),
        ({"max_backfill": True}, "max_backfill"),
    ],
)
def test_catch_up_validates(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInput) as info:
        CatchUp(**kwargs)  # type: ignore[arg-type]
    assert info.value.field == field


def test_catch_up_defaults_and_normalization() -> None:
    assert CatchUp() == CatchUp("once", 60.0, 100)
    assert CatchUp("Skip ").policy == "skip"  # type: ignore[arg-type]
    assert CatchUp(grace_s=0).grace_s == 0


# --- worked examples: due slots 10:00 .. 10:09, now 10:09:30 --------------------------------


def plan(expr: str, policy: str, now: datetime, **kwargs: float) -> CatchUpPlan:
    limit = int(kwargs.pop("record_limit", 1000))
    return plan_catchup(parse_schedule(expr), T, now, CatchUp(policy, **kwargs), limit)  # type: ignore[arg-type]


NOW = T + timedelta(minutes=9, seconds=30)


@pytest.mark.parametrize("expr", EVERY_MINUTE)
def test_once_runs_the_newest_and_skips_the_rest(expr: str) -> None:
    assert plan(expr, "once", NOW) == CatchUpPlan(minutes(*range(9)), T + 9 * MINUTE, 0)


@pytest.mark.parametrize("expr", EVERY_MINUTE)
def test_once_with_one_due_slot_skips_nothing(expr: str) -> None:
    assert plan(expr, "once", T + timedelta(seconds=5)) == CatchUpPlan((), T, 0)
    assert plan(expr, "once", T) == CatchUpPlan((), T, 0)  # now == slot: due


@pytest.mark.parametrize("expr", EVERY_MINUTE)
@pytest.mark.parametrize("policy", ["skip", "once", "backfill"])
def test_nothing_due(expr: str, policy: str) -> None:
    assert plan(expr, policy, T - timedelta(microseconds=1)) == CatchUpPlan((), T, 0)


@pytest.mark.parametrize("expr", EVERY_MINUTE)
def test_skip_keeps_slots_within_grace(expr: str) -> None:
    # 10:09 is 30 s late: within a 60 s grace, so it runs; 10:08 is 90 s late.
    assert plan(expr, "skip", NOW, grace_s=60) == CatchUpPlan(minutes(*range(9)), T + 9 * MINUTE)
    # With 20 s of grace every due slot is too late: resume at the first future slot.
    assert plan(expr, "skip", NOW, grace_s=20) == CatchUpPlan(minutes(*range(10)), T + 10 * MINUTE)
    # With a long grace nothing is skipped: the oldest due slot runs first.
    assert plan(expr, "skip", NOW, grace_s=3600) == CatchUpPlan((), T)


@pytest.mark.parametrize("expr", EVERY_MINUTE)
def test_skip_grace_boundary_is_strict(expr: str) -> None:
    exactly_grace_late = T + 9 * MINUTE + timedelta(seconds=60)
    assert plan(expr, "skip", exactly_grace_late, grace_s=60).next_slot == T + 9 * MINUTE
    just_over = exactly_grace_late + timedelta(microseconds=1)
    assert plan(expr, "skip", just_over, grace_s=60).next_slot == T + 10 * MINUTE


@pytest.mark.parametrize("expr", EVERY_MINUTE)
def test_backfill_runs_the_newest_up_to_the_cap(expr: str) -> None:
    assert plan(expr, "backfill", NOW, max_backfill=3) == CatchUpPlan(
        minutes(*range(7)), T + 7 * MINUTE
    )
    assert plan(expr, "backfill", NOW, max_backfill=10) == CatchUpPlan((), T)
    assert plan(expr, "backfill", NOW) == CatchUpPlan((), T)  # default cap 100


@pytest.mark.parametrize("expr", EVERY_MINUTE)
def test_record_limit_lists_the_newest_and_counts_the_rest(expr: str) -> None:
    capped = plan(expr, "once", NOW, record_limit=2)
    assert capped == CatchUpPlan(minutes(7, 8), T + 9 * MINUTE, 7)
    assert capped.skipped_total == 9
    assert plan(expr, "once", NOW, record_limit=0) == CatchUpPlan((), T + 9 * MINUTE, 9)
    assert plan(expr, "backfill", NOW, max_backfill=3, record_limit=4).skipped == minutes(
        3, 4, 5, 6
    )


@pytest.mark.parametrize("expr", EVERY_MINUTE)
def test_first_due_between_slots_counts_from_the_next_slot(expr: str) -> None:
    schedule = parse_schedule(expr)
    got = plan_catchup(schedule, T - timedelta(seconds=30), NOW, CatchUp("once"))
    assert got == CatchUpPlan(minutes(*range(9)), T + 9 * MINUTE, 0)


def test_rejects_naive_times_and_bad_limits() -> None:
    schedule = parse_schedule("@hourly")
    with pytest.raises(InvalidInput, match="first_due"):
        plan_catchup(schedule, T.replace(tzinfo=None), T, CatchUp())
    with pytest.raises(InvalidInput, match="now"):
        plan_catchup(schedule, T, T.replace(tzinfo=None), CatchUp())
    with pytest.raises(InvalidInput, match="record_limit"):
        plan_catchup(schedule, T, T, CatchUp(), -1)


def test_once_across_the_berlin_autumn_repeat() -> None:
    twice = parse_schedule("30 2 * * *", "Europe/Berlin", dst_repeated="twice")
    first = datetime(2026, 10, 24, 0, 30, tzinfo=UTC)
    got = plan_catchup(twice, first, datetime(2026, 10, 25, 12, tzinfo=UTC), CatchUp("once"))
    assert got.skipped == (first, datetime(2026, 10, 25, 0, 30, tzinfo=UTC))
    assert got.next_slot == datetime(2026, 10, 25, 1, 30, tzinfo=UTC)


# --- long outages --------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["skip", "once", "backfill"])
def test_three_days_of_every_second_is_constant_time(policy: str) -> None:
    schedule = parse_schedule("@every 1s")
    now = T + timedelta(days=3)
    started = time.perf_counter()
    got = plan_catchup(schedule, T, now, CatchUp(policy))  # type: ignore[arg-type]
    assert time.perf_counter() - started < 0.1
    due = 3 * 86_400 + 1
    expected_skipped = {"skip": due - 61, "once": due - 1, "backfill": due - 100}[policy]
    assert got.skipped_total == expected_skipped
    assert len(got.skipped) == 1000
    assert got.skipped[-1] == got.next_slot - timedelta(seconds=1)
    assert got.next_slot == T + timedelta(seconds=expected_skipped)


def test_a_day_of_six_field_every_second_cron_is_walked() -> None:
    now = T + timedelta(days=1)
    every = plan_catchup(parse_schedule("@every 1s"), T, now, CatchUp("once"))
    started = time.perf_counter()
    cron = plan_catchup(parse_schedule("* * * * * *"), T, now, CatchUp("once"))
    assert time.perf_counter() - started < 5  # ~0.1 s in UTC; generous for slow CI
    assert cron == every


# --- properties against a brute-force reference ---------------------------------------------


def reference(
    schedule: Schedule, first_due: datetime, now: datetime, catch_up: CatchUp
) -> tuple[list[datetime], datetime]:
    due = schedule.slots_between(first_due, now, 10**6)
    future = schedule.next_after(max(now, first_due - timedelta(microseconds=1)))
    if catch_up.policy == "skip":
        grace = timedelta(seconds=catch_up.grace_s)
        late = [s for s in due if now - s > grace]
        return late, (due[len(late)] if len(late) < len(due) else future)
    keep = 1 if catch_up.policy == "once" else catch_up.max_backfill
    cut = max(0, len(due) - keep)
    return due[:cut], (due[cut] if due else future)


SCHEDULES = st.sampled_from(
    [
        "@every 1m",
        "@every 45s",
        "@every 7s",
        "* * * * *",
        "*/5 * * * *",
        "*/20 * * * * *",
        "30 2 * * *",
        "*/15 1-3 * * *",
    ]
)
ZONES = st.sampled_from(["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"])
NEAR_CHANGES = st.sampled_from(
    [
        datetime(2026, 3, 29, tzinfo=UTC),
        datetime(2026, 10, 24, 23, tzinfo=UTC),
        datetime(2026, 11, 1, 4, tzinfo=UTC),
        datetime(2026, 4, 4, 13, tzinfo=UTC),
        datetime(2026, 10, 3, 14, tzinfo=UTC),
        datetime(2026, 7, 1, tzinfo=UTC),
    ]
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    expr=SCHEDULES,
    tz=ZONES,
    repeated=st.sampled_from(["once", "twice"]),
    skipped=st.sampled_from(["shift", "skip"]),
    base=NEAR_CHANGES,
    lead_s=st.integers(min_value=0, max_value=4 * 3600),
    late_s=st.integers(min_value=-3600, max_value=5 * 3600),
    policy=st.sampled_from(["skip", "once", "backfill"]),
    grace_s=st.sampled_from([0.0, 1.0, 59.5, 60.0, 600.0, 7200.0]),
    max_backfill=st.integers(min_value=1, max_value=40),
    record_limit=st.integers(min_value=0, max_value=25),
)
def test_plan_matches_reference(
    expr: str,
    tz: str,
    repeated: str,
    skipped: str,
    base: datetime,
    lead_s: int,
    late_s: int,
    policy: str,
    grace_s: float,
    max_backfill: int,
    record_limit: int,
) -> None:
    schedule = parse_schedule(expr, tz, repeated, skipped)  # type: ignore[arg-type]
    first_due = schedule.next_after(base + timedelta(seconds=lead_s))
    now = first_due + timedelta(seconds=late_s, microseconds=late_s % 7)
    catch_up = CatchUp(policy, grace_s, max_backfill)  # type: ignore[arg-type]
    got = plan_catchup(schedule, first_due, now, catch_up, record_limit)
    all_skipped, next_slot = reference(schedule, first_due, now, catch_up)
    assert got.next_slot == next_slot
    assert got.skipped_total == len(all_skipped)
    assert list(got.skipped) == all_skipped[len(all_skipped) - len(got.skipped) :]
    assert len(got.skipped) == min(record_limit, len(all_skipped))
    # Invariants: next_slot is a slot, skipped ones are slots, increasing, all before it.
    assert schedule.next_after(got.next_slot - timedelta(microseconds=1)) == got.next_slot
    for slot in got.skipped:
        assert schedule.next_after(slot - timedelta(microseconds=1)) == slot
    assert all(a < b for a, b in itertools.pairwise([*got.skipped, got.next_slot]))
    assert got.next_slot >= first_due
    if policy != "skip" and first_due <= now:
        assert got.next_slot <= now  # a due slot runs now


@settings(max_examples=100, deadline=None)
@given(
    after=st.datetimes(datetime(2000, 1, 1), datetime(2050, 1, 1), timezones=st.just(UTC)),
    late_s=st.integers(min_value=0, max_value=3 * 86_400),
    policy=st.sampled_from(["skip", "once", "backfill"]),
    grace_s=st.floats(min_value=0, max_value=4000, allow_nan=False),
    record_limit=st.integers(min_value=0, max_value=50),
)
def test_every_arithmetic_equals_walking_cron(
    after: datetime, late_s: int, policy: str, grace_s: float, record_limit: int
) -> None:
    every, cron = parse_schedule("@every 1m"), parse_schedule("* * * * *")
    first_due = every.next_after(after)
    now = first_due + timedelta(seconds=late_s)
    catch_up = CatchUp(policy, grace_s, 30)  # type: ignore[arg-type]
    assert plan_catchup(every, first_due, now, catch_up, record_limit) == plan_catchup(
        cron, first_due, now, catch_up, record_limit
    )
