"""Sign-in hygiene, pure: the throttle of failed sign-ins (per source and per token prefix,
bounded), token expiry as ``pulse tokens create --expires`` reads it, strict JSON bodies,
the CSRF check, and the options of ``pulse web`` about proxies and cookies."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cluster.cli.web import parse_proxies
from cluster.errors import InvalidInput
from cluster.timing.expiry import Expiry, parse_expiry
from cluster.web.bodies import MAX_BODY_DEPTH, parse_json
from cluster.web.limits import FailureLimiter, PingRate, SignInThrottle, prefix_of
from cluster.web.server import is_loopback
from cluster.web.tokens import csrf_matches, csrf_token, new_session_id

NOW = datetime(2026, 6, 1, tzinfo=UTC)


def test_a_source_past_the_limit_is_refused_but_other_sources_and_prefixes_are_not() -> None:
    throttle = SignInThrottle(max_failures=3, window_s=60)
    answers = [throttle.refused("10.0.0.1", f"pulse_guess{i}xx", now=i) for i in range(4)]
    assert answers[:3] == [None, None, None] and answers[3] == pytest.approx(57)
    assert throttle.refused("10.0.0.2", "pulse_other1", now=5) is None


def test_one_prefix_tried_from_many_sources_is_refused() -> None:
    throttle = SignInThrottle(max_failures=3, window_s=60)
    answers = [throttle.refused(f"10.0.0.{i}", "pulse_AAAAAAxyz", now=i) for i in range(4)]
    assert answers[:3] == [None, None, None] and answers[3] is not None
    assert prefix_of("pulse_AAAAAAxyz") == "AAAAAA"


def test_failures_age_out_of_the_window() -> None:
    throttle = SignInThrottle(max_failures=2, window_s=10)
    for i in range(5):
        throttle.refused("10.0.0.1", f"pulse_{i}", now=0)
    assert throttle.refused("10.0.0.1", "pulse_9", now=11) is None


def test_the_limiter_holds_a_bounded_number_of_keys_and_failures() -> None:
    limiter = FailureLimiter(max_failures=3, window_s=60, max_keys=100)
    for i in range(1000):
        limiter.failed(f"10.0.{i // 256}.{i % 256}", now=1)
    for _ in range(1000):
        limiter.failed("10.9.9.9", now=2)
    assert len(limiter) == 100
    assert len(limiter._failures["10.9.9.9"]) == 3
    assert limiter.retry_after_s("10.9.9.9", now=3) is not None


def test_expiry_is_a_duration_an_iso_time_or_never() -> None:
    assert parse_expiry("30d", now=NOW) == Expiry(after_s=30 * 86400)
    assert parse_expiry("never").never
    assert parse_expiry("2027-01-01T00:00:00+02:00", now=NOW).at == datetime(
        2026, 12, 31, 22, tzinfo=UTC
    )
    assert parse_expiry("2027-01-01", now=NOW).at == datetime(2027, 1, 1, tzinfo=UTC)
    for bad in ("soon", "0s", "2020-01-01T00:00:00Z", "2027-13-01", "", "1000000d"):
        with pytest.raises(InvalidInput) as caught:
            parse_expiry(bad, now=NOW)
        assert caught.value.field == "expires"


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("1" * 5000, "body"),
        ('{"retries": ' + "9" * 5000 + "}", "body"),
        ("1e999", "body"),
        ('{"timeout": -1e999}', "body"),
        ("NaN", "body"),
        ('{"grace": Infinity}', "body"),
        ('{"name": "a", "name": "b"}', "name"),
        ('{"name": ', "body"),
        (b"\xff\xfe", "body"),
    ],
)
def test_a_body_that_is_not_strict_json_is_refused_naming_a_field(
    text: str | bytes, field: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_json(text)
    assert caught.value.field == field
    assert "\n" not in caught.value.problem


def test_strict_json_still_reads_ordinary_bodies() -> None:
    assert parse_json('{"a": [1, 2.5, -3e10, null, true], "b": {"c": "d"}}') == {
        "a": [1, 2.5, -3e10, None, True],
        "b": {"c": "d"},
    }


def test_the_csrf_token_is_checked_in_constant_time_whatever_is_presented() -> None:
    session = new_session_id()
    assert csrf_matches(session, csrf_token(session))
    for wrong in (None, "", "é" * 64, csrf_token(new_session_id())):
        assert not csrf_matches(session, wrong)


def test_proxies_are_addresses_or_networks() -> None:
    assert parse_proxies("127.0.0.1, 10.0.0.0/8,::1") == ["127.0.0.1", "10.0.0.0/8", "::1"]
    assert parse_proxies("") == [] and parse_proxies("none") == []
    assert parse_proxies("*") == ["*"]
    with pytest.raises(InvalidInput):
        parse_proxies("proxy.example.com")


def test_only_a_loopback_bind_leaves_the_cookie_without_secure() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3")


def test_only_unknown_ping_tokens_count_against_their_source() -> None:
    rate = PingRate(per_token=3, per_source=5)
    for i in range(20):  # guesses: each its own token, all from one address
        assert rate.refused(f"guess{i}", now=i / 100) is None
        wait = rate.unknown("10.0.0.1", now=i / 100)
        assert (wait is None) == (i < 5)
    # a valid token from the same address is counted on its own, under its own limit
    assert [rate.refused("valid", now=1) for _ in range(4)][:3] == [None] * 3
    assert rate.refused("valid", now=1) is not None


def test_a_body_nested_too_deeply_is_one_line_of_422() -> None:
    for depth in (MAX_BODY_DEPTH + 1, 500, 100_000):
        with pytest.raises(InvalidInput) as caught:
            parse_json("[" * depth + "]" * depth)
        assert caught.value.field == "body" and "nested" in caught.value.problem
    assert parse_json("[" * MAX_BODY_DEPTH + "]" * MAX_BODY_DEPTH) is not None
