"""Schedule grammar, validation, caching and slot math in UTC (DST lives in test_schedule_dst)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta, timezone

import pytest
from croniter import croniter
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from cluster.errors import InvalidInput
from cluster.timing.instants import EPOCH
from cluster.timing.schedule import MACROS, Schedule, parse_schedule

T0 = datetime(2026, 5, 13, 10, 7, 30, tzinfo=UTC)
PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

SECONDS = st.sampled_from(["0", "*/15", "5,35", "0-10/5", "59", "*"])
MINUTES = st.sampled_from(["*", "0", "*/5", "*/7", "15,45", "0-30/10", "59"])
HOURS = st.sampled_from(["*", "0", "2", "1-3", "*/6", "2,14", "0-23/4", "23"])
DOMS = st.sampled_from(["*", "*", "1", "15", "L", "1-7", "*/10", "29", "31", "?"])
MONTHS = st.sampled_from(["*", "*", "1", "2", "3,10", "*/3", "jan-mar", "4,11", "feb"])
DOWS = st.sampled_from(["*", "*", "0", "1-5", "sun", "mon,fri", "5", "7", "1#2", "?"])


@st.composite
def cron_exprs(draw: st.DrawFn) -> tuple[str, bool]:
    """(expression, has_seconds)."""
    fields = [draw(f) for f in (MINUTES, HOURS, DOMS, MONTHS, DOWS)]
    if draw(st.booleans()):
        return " ".join([draw(SECONDS), *fields]), True
    return " ".join(fields), False


def utc_datetimes(start: int = 1995, end: int = 2060) -> st.SearchStrategy[datetime]:
    return st.datetimes(
        min_value=datetime(start, 1, 1), max_value=datetime(end, 12, 31), timezones=st.just(UTC)
    )


def try_parse(expr: str, tz: str = "UTC") -> Schedule:
    try:
        return parse_schedule(expr, tz)
    except InvalidInput as exc:
        assert "never fires" in exc.problem, exc
        assume(False)
        raise


# --- grammar -----------------------------------------------------------------------------


@pytest.mark.parametrize("macro", sorted(MACROS))
def test_macros_match_their_cron_equivalents(macro: str) -> None:
    assert parse_schedule(macro).next_n(T0, 5) == parse_schedule(MACROS[macro]).next_n(T0, 5)


def test_macro_values() -> None:
    assert parse_schedule("@hourly").next_after(T0) == datetime(2026, 5, 13, 11, tzinfo=UTC)
    assert parse_schedule("@daily").next_after(T0) == datetime(2026, 5, 14, tzinfo=UTC)
    assert parse_schedule("@weekly").next_after(T0) == datetime(2026, 5, 17, tzinfo=UTC)  # Sun
    assert parse_schedule("@monthly").next_after(T0) == datetime(2026, 6, 1, tzinfo=UTC)
    assert parse_schedule("@yearly").next_after(T0) == datetime(2027, 1, 1, tzinfo=UTC)


def test_six_fields_put_seconds_first() -> None:
    slots = parse_schedule("15 * * * * *").next_n(T0, 3)
    assert slots == [T0.replace(minute=8, second=15) + timedelta(minutes=i) for i in range(3)]
    every_ten = parse_schedule("*/10 30 10 * * *").next_n(T0, 7)
    assert every_ten == [T0.replace(minute=30, second=10 * i) for i in range(6)] + [
        T0.replace(day=14, minute=30, second=0)
    ]


def test_five_fields_fire_on_the_minute() -> None:
    assert parse_schedule("*/5 * * * *").next_n(T0, 2) == [
        T0.replace(minute=10, second=0),
        T0.replace(minute=15, second=0),
    ]


def test_dom_and_dow_restricted_means_either() -> None:
    slots = parse_schedule("0 0 13 * 5").next_n(datetime(2026, 2, 1, tzinfo=UTC), 4)
    assert [s.date().isoformat() for s in slots] == [
        "2026-02-06",
        "2026-02-13",  # the 13th, and a Friday
        "2026-02-20",
        "2026-02-27",
    ]


@pytest.mark.parametrize(
    ("expr", "after", "expected"),
    [
        ("0 0 L * *", datetime(2028, 1, 31, 1, tzinfo=UTC), datetime(2028, 2, 29, tzinfo=UTC)),
        ("0 12 * * 1#2", datetime(2026, 5, 1, tzinfo=UTC), datetime(2026, 5, 11, 12, tzinfo=UTC)),
        ("0 0 29 2 *", datetime(2026, 1, 1, tzinfo=UTC), datetime(2028, 2, 29, tzinfo=UTC)),
        ("0 0 * 2 1#5", datetime(2026, 1, 1, tzinfo=UTC), datetime(2044, 2, 29, tzinfo=UTC)),
        ("0 0 1W * *", datetime(2026, 2, 1, tzinfo=UTC), datetime(2026, 2, 2, tzinfo=UTC)),
        (
            "0 9 * * mon-fri",
            datetime(2026, 5, 15, 9, tzinfo=UTC),
            datetime(2026, 5, 18, 9, tzinfo=UTC),
        ),
    ],
)
def test_day_patterns(expr: str, after: datetime, expected: datetime) -> None:
    assert parse_schedule(expr).next_after(after) == expected


# --- validation and normalization -----------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field", "hint"),
    [
        ({"expr": ""}, "schedule", "empty"),
        ({"expr": "   "}, "schedule", "empty"),
        ({"expr": "x"}, "schedule", "5 fields"),
        ({"expr": "* * *"}, "schedule", "5 fields"),
        ({"expr": "* * * * * * *"}, "schedule", "got 7"),
        ({"expr": "61 * * * *"}, "schedule", "invalid cron"),
        ({"expr": "* 24 * * *"}, "schedule", "invalid cron"),
        ({"expr": "* * 0 * *"}, "schedule", "invalid cron"),
        ({"expr": "* * * 13 *"}, "schedule", "invalid cron"),
        ({"expr": "* * * * funday"}, "schedule", "invalid cron"),
        ({"expr": "*/0 * * * *"}, "schedule", "invalid cron"),
        ({"expr": "0 0 30 2 *"}, "schedule", "never fires"),
        ({"expr": "0 0 31 4,6,9,11 *"}, "schedule", "never fires"),
        ({"expr": "@reboot"}, "schedule", "unknown macro"),
        ({"expr": "@every"}, "schedule", "empty"),
        ({"expr": "@every 0s"}, "schedule", "at least 1s"),
        ({"expr": "@every 500ms"}, "schedule", "at least 1s"),
        ({"expr": "@every -5s"}, "schedule", "negative"),
        ({"expr": "@every 3651d"}, "schedule", "at most 3650d"),
        ({"expr": "@every soon"}, "schedule", "expected a duration"),
        ({"expr": "H * * * *"}, "schedule", "not supported"),
        ({"expr": "R 3 * * *"}, "schedule", "not supported"),
        ({"expr": 42}, "schedule", "string"),
        ({"expr": "* * * * *", "tz": "Mars/Olympus_Mons"}, "tz", "unknown time zone"),
        ({"expr": "* * * * *", "tz": ""}, "tz", "IANA"),
        ({"expr": "* * * * *", "tz": "../../etc/passwd"}, "tz", "unknown time zone"),
        ({"expr": "* * * * *", "tz": "America"}, "tz", "unknown time zone"),
        ({"expr": "* * * * *", "dst_repeated": "thrice"}, "dst_repeated", "once, twice"),
        ({"expr": "* * * * *", "dst_skipped": "never"}, "dst_skipped", "shift, skip"),
    ],
)
def test_rejects_bad_input_naming_the_field(
    kwargs: dict[str, object], field: str, hint: str
) -> None:
    for build in (parse_schedule, Schedule):
        with pytest.raises(InvalidInput) as info:
            build(**kwargs)  # type: ignore[arg-type]
        assert info.value.field == field
        assert hint in info.value.problem
        assert "\n" not in str(info.value)


def test_error_message_shows_the_users_text_not_the_reordered_one() -> None:
    with pytest.raises(InvalidInput) as info:
        parse_schedule("61 * * * *")
    assert "'61 * * * *'" in info.value.problem
    assert "0 61" not in info.value.problem


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("  0  0 * *   * ", "0 0 * * *"),
        ("@DAILY", "@daily"),
        ("@Every   30s ", "@every 30s"),
        ("\t@hourly\n", "@hourly"),
    ],
)
def test_normalizes_the_expression(raw: str, normal: str) -> None:
    assert parse_schedule(raw).expr == normal
    assert Schedule(raw).expr == normal


def test_parse_is_cached_on_normalized_arguments() -> None:
    first = parse_schedule("*/5 * * * *", "Europe/Berlin")
    assert parse_schedule("*/5 * * * *", "Europe/Berlin") is first
    assert parse_schedule(" */5  * * * * ", " Europe/Berlin ") is first
    assert parse_schedule("*/5 * * * *", "Europe/Berlin", "twice") is not first


def test_schedule_is_a_value() -> None:
    assert Schedule("@every 1m") == parse_schedule("@every 1m")
    assert hash(Schedule("0 * * * *", "UTC")) == hash(parse_schedule("0 * * * *"))
    assert Schedule("0 * * * *", "UTC") != Schedule("0 * * * *", "Europe/Berlin")
    assert "_zone" not in repr(Schedule("@hourly"))


# --- slot semantics -----------------------------------------------------------------------


def test_next_after_is_strictly_after() -> None:
    hourly = parse_schedule("@hourly")
    on_slot = datetime(2026, 5, 13, 10, tzinfo=UTC)
    assert hourly.next_after(on_slot) == on_slot + timedelta(hours=1)
    assert hourly.next_after(on_slot - timedelta(microseconds=1)) == on_slot
    assert hourly.next_after(on_slot + timedelta(microseconds=1)) == on_slot + timedelta(hours=1)


def test_after_may_be_in_any_zone_and_results_are_utc() -> None:
    schedule = parse_schedule("30 9 * * *", "Europe/Berlin")
    in_tokyo = T0.astimezone(timezone(timedelta(hours=9)))
    assert schedule.next_after(in_tokyo) == schedule.next_after(T0)
    slot = schedule.next_after(T0)
    assert slot.tzinfo is UTC
    assert slot == datetime(2026, 5, 14, 7, 30, tzinfo=UTC)  # 09:30 CEST


def test_naive_datetimes_are_rejected() -> None:
    with pytest.raises(InvalidInput, match="timezone-aware"):
        parse_schedule("@hourly").next_after(datetime(2026, 1, 1))
    with pytest.raises(InvalidInput, match="timezone-aware"):
        parse_schedule("@every 1m").next_n(datetime(2026, 1, 1), 2)


def test_next_n_and_slots_between() -> None:
    schedule = parse_schedule("*/15 * * * *")
    start = datetime(2026, 5, 13, 10, tzinfo=UTC)
    quarter = timedelta(minutes=15)
    assert schedule.next_n(start, 3) == [start + quarter * i for i in (1, 2, 3)]
    assert schedule.next_n(start, 0) == []
    both_ends = schedule.slots_between(start, start + quarter * 4, limit=100)
    assert both_ends == [start + quarter * i for i in range(5)]
    assert schedule.slots_between(start, start + quarter * 4, limit=2) == both_ends[:2]
    assert schedule.slots_between(start + timedelta(seconds=1), start + quarter, 10) == [
        start + quarter
    ]
    assert schedule.slots_between(start + quarter, start, 10) == []


def test_no_slot_left_before_year_10000() -> None:
    with pytest.raises(InvalidInput, match="no slot after"):
        parse_schedule("0 0 29 2 *").next_after(datetime(9996, 3, 1, tzinfo=UTC))


# --- @every -----------------------------------------------------------------------------------


def test_every_is_aligned_to_the_epoch_not_to_after() -> None:
    schedule = parse_schedule("@every 1h30m")
    slot = schedule.next_after(T0)
    assert (slot - EPOCH) % timedelta(minutes=90) == timedelta(0)
    assert slot - timedelta(minutes=90) <= T0 < slot
    assert schedule.interval == timedelta(minutes=90)
    assert parse_schedule("0 * * * *").interval is None


def test_every_ignores_the_time_zone() -> None:
    utc = parse_schedule("@every 7m")
    for tz in ("Europe/Berlin", "Australia/Lord_Howe", "Asia/Kathmandu"):
        assert parse_schedule("@every 7m", tz).next_n(T0, 5) == utc.next_n(T0, 5)


def test_every_before_the_epoch_and_with_milliseconds() -> None:
    assert parse_schedule("@every 1d").next_after(datetime(1969, 12, 31, 12, tzinfo=UTC)) == EPOCH
    slots = parse_schedule("@every 1s500ms").next_n(EPOCH, 2)
    assert slots == [EPOCH + timedelta(seconds=1.5), EPOCH + timedelta(seconds=3)]


@PROPERTY
@given(st.integers(min_value=1, max_value=10**6), utc_datetimes(1900, 2200))
def test_every_slots_are_epoch_aligned(interval_s: int, after: datetime) -> None:
    schedule = parse_schedule(f"@every {interval_s}")
    step = timedelta(seconds=interval_s)
    slots = schedule.next_n(after, 3)
    assert (slots[0] - EPOCH) % step == timedelta(0)
    assert slots[0] - step <= after < slots[0]
    assert slots[1] - slots[0] == slots[2] - slots[1] == step


# --- properties against croniter as the oracle (UTC has no DST) ----------------------------


@PROPERTY
@given(cron_exprs(), utc_datetimes())
def test_utc_slots_equal_croniter(expr_info: tuple[str, bool], after: datetime) -> None:
    expr, has_seconds = expr_info
    schedule = try_parse(expr)
    oracle = croniter(expr, after.replace(tzinfo=None), second_at_beginning=has_seconds)
    expected = [oracle.get_next(datetime).replace(tzinfo=UTC) for _ in range(12)]
    slots = schedule.next_n(after, 12)
    assert slots == expected
    for slot in slots:
        assert croniter.match(expr, slot.replace(tzinfo=None), second_at_beginning=has_seconds)


@PROPERTY
@given(
    cron_exprs(),
    utc_datetimes(),
    st.sampled_from(["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"]),
)
def test_iteration_equals_repeated_next_after(
    expr_info: tuple[str, bool], after: datetime, tz: str
) -> None:
    schedule = try_parse(expr_info[0], tz)
    slots = list(itertools.islice(schedule.iter_after(after), 8))
    chained, cursor = [], after
    for _ in range(8):
        cursor = schedule.next_after(cursor)
        chained.append(cursor)
    assert slots == chained
    assert all(a < b for a, b in itertools.pairwise([after, *slots]))


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=" */-,#?0123456789LWHR@abcdefghijklmnopqrstuvwxyz", max_size=24))
@example("@scHeduLes")
def test_arbitrary_text_fails_only_with_invalid_input(text: str) -> None:
    try:
        schedule = parse_schedule(text)
    except InvalidInput as exc:
        # "@schedules ..." in any case is the several-schedules form: its errors name
        # "schedules" or one of its entries ("schedules[1]").
        assert exc.field.startswith("schedule"), exc.field
        return
    assert schedule.next_after(T0) > T0


def test_a_schedule_starting_at_an_instant_has_no_slot_at_or_before_it() -> None:
    every = Schedule("@every 1m")
    since = datetime(2026, 1, 1, 0, 4, tzinfo=UTC)
    bounded = every.starting(since)
    assert every.starting(None) is every and bounded.starting(since) is bounded
    assert bounded.next_after(datetime(2026, 1, 1, tzinfo=UTC)) == since + timedelta(minutes=1)
    assert bounded.slots_between(since - timedelta(minutes=3), since + timedelta(minutes=2), 9) == [
        since + timedelta(minutes=1),
        since + timedelta(minutes=2),
    ]
    later = since + timedelta(minutes=5)
    assert bounded.next_after(later) == every.next_after(later)  # after it, unchanged
    assert every.next_after(datetime(2026, 1, 1, tzinfo=UTC)) == since - timedelta(minutes=3)
