"""Retention settings: parsing and canonical forms of the config keys, the cluster defaults
and a job's overrides, and the rule that says which runs are kept."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cluster.config.retention import (
    DEFAULT_KEEP_FAILED_FOR_S,
    DEFAULT_KEEP_FOR_S,
    DEFAULT_KEEP_RUNS,
    KEYS,
    MAX_KEEP_S,
    Retention,
    canonical,
)
from cluster.errors import InvalidInput

DAY = 86400.0


@pytest.mark.parametrize(
    ("key", "text", "stored"),
    [
        ("keep_for", "30d", "30d"),
        ("keep_for", "720h", "30d"),
        ("keep_for", " 90m ", "1h30m"),
        ("keep_for", "45", "45s"),
        ("keep_failed_for", "1d12h", "1d12h"),
        ("keep_failed_for", "500ms", "500ms"),
        ("keep_runs", "1000", "1000"),
        ("keep_runs", " 1_000 ", "1000"),
        ("keep_runs", "1", "1"),
        ("keep_runs", "2147483647", "2147483647"),
    ],
)
def test_good_values_are_stored_in_canonical_form(key: str, text: str, stored: str) -> None:
    assert canonical(key, text) == stored


@pytest.mark.parametrize(
    ("key", "text", "problem"),
    [
        ("keep_for", "0s", "must be positive"),
        ("keep_for", "0", "must be positive"),
        ("keep_for", "-1d", "must not be negative"),
        ("keep_for", "forever", "expected a duration"),
        ("keep_for", "", "is empty"),
        ("keep_for", "36501d", "at most 36500d"),
        ("keep_failed_for", "0ms", "must be positive"),
        ("keep_failed_for", "1d\x00", "expected a duration"),
        ("keep_runs", "0", "at least 1"),
        ("keep_runs", "-5", "whole number"),
        ("keep_runs", "1.5", "whole number"),
        ("keep_runs", "ten", "whole number"),
        ("keep_runs", "", "whole number"),
        ("keep_runs", "\u0661\u0662", "whole number"),  # Arabic-Indic digits
        ("keep_runs", "2147483648", "at most 2147483647"),
    ],
)
def test_bad_values_name_their_key(key: str, text: str, problem: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        canonical(key, text)
    assert caught.value.field == key
    assert problem in caught.value.problem


@pytest.mark.parametrize("key", ["keep", "KEEP_FOR", "keep-for", "", "output_limit"])
def test_unknown_keys_are_named(key: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        canonical(key, "1d")
    assert caught.value.field == key
    assert "unknown config key" in caught.value.problem
    assert all(k in caught.value.problem for k in KEYS)


def test_defaults_and_their_stored_form() -> None:
    default = Retention()
    assert (default.keep_for_s, default.keep_runs, default.keep_failed_for_s) == (
        30 * DAY,
        1000,
        90 * DAY,
    )
    assert default.to_config() == {"keep_for": "30d", "keep_runs": "1000", "keep_failed_for": "90d"}
    assert Retention.from_config(default.to_config()) == default
    assert Retention.from_config({}) == default


def test_config_rows_override_defaults_and_other_keys_are_ignored() -> None:
    got = Retention.from_config({"keep_for": "7d", "alert_timeout": "5s"})
    assert got == Retention(keep_for_s=7 * DAY)
    got = Retention.from_config({"keep_runs": "50", "keep_failed_for": "1d"})
    assert got == Retention(keep_runs=50, keep_failed_for_s=DAY)


def test_a_bad_stored_value_is_refused_with_its_key() -> None:
    with pytest.raises(InvalidInput) as caught:
        Retention.from_config({"keep_runs": "lots"})
    assert caught.value.field == "keep_runs"


def test_a_jobs_keep_for_replaces_the_clusters_and_failures_keep_the_longer() -> None:
    cluster = Retention(keep_for_s=30 * DAY, keep_runs=1000, keep_failed_for_s=90 * DAY)
    plain = cluster.for_job(None, None)
    assert (plain.keep_for_s, plain.keep_failed_for_s, plain.keep_runs) == (
        30 * DAY,
        90 * DAY,
        1000,
    )
    short = cluster.for_job(30.0, 5)
    assert (short.keep_for_s, short.keep_failed_for_s, short.keep_runs) == (30.0, 90 * DAY, 5)
    long = cluster.for_job(365 * DAY, None)
    assert (long.keep_for_s, long.keep_failed_for_s) == (365 * DAY, 365 * DAY)
    # A job's keep_for is not bounded when added; the rule reads it as at most MAX_KEEP_S.
    huge = cluster.for_job(1e15, None)
    assert huge.keep_for_s == huge.keep_failed_for_s == MAX_KEEP_S


def test_expired_by_age_by_status_and_by_count() -> None:
    rule = Retention().for_job(60.0, 3)
    assert not rule.expired("succeeded", 60.0, 0)  # exactly keep_for old: kept
    assert rule.expired("succeeded", 60.001, 0)
    assert rule.expired("skipped", 61.0, 0)
    for failed in ("failed", "timed_out", "lost"):
        assert not rule.expired(failed, 61.0, 0)
        assert not rule.expired(failed, DEFAULT_KEEP_FAILED_FOR_S, 0)
        assert rule.expired(failed, DEFAULT_KEEP_FAILED_FOR_S + 1, 0)
    assert not rule.expired("succeeded", 0.0, 2)  # the 3rd newest
    assert rule.expired("succeeded", 0.0, 3)  # the 4th newest
    assert rule.expired("failed", 0.0, 3)  # the count binds failures too


@given(
    status=st.sampled_from(["succeeded", "failed", "timed_out", "skipped", "lost"]),
    age_s=st.floats(0, 400 * DAY),
    newer=st.integers(0, 2000),
    keep_for_s=st.one_of(st.none(), st.floats(1, 200 * DAY)),
    keep_runs=st.one_of(st.none(), st.integers(1, 1500)),
)
def test_a_failure_is_never_kept_shorter_than_a_success(
    status: str, age_s: float, newer: int, keep_for_s: float | None, keep_runs: int | None
) -> None:
    rule = Retention().for_job(keep_for_s, keep_runs)
    if rule.expired(status, age_s, newer) and status != "succeeded":
        assert rule.expired("succeeded", age_s, newer)
    assert rule.keep_runs == (keep_runs or DEFAULT_KEEP_RUNS)
    assert rule.keep_for_s == (keep_for_s or DEFAULT_KEEP_FOR_S)
