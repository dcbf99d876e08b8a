"""A finished run's metrics against its job's ``--assert``: the outcome kept and the reason
sent with the completion, or the run failed (``--assert-fails``); runs that did not succeed
and jobs without checks are left alone."""

from __future__ import annotations

from cluster.store.lock.records import ClaimedJob
from node.handlers.context import Outcome
from node.pipeline.checks import checked
from tests.helpers.claimed import job as claimed


def job(asserts: str | None, fails: bool = False) -> ClaimedJob:
    return claimed("m:f")._replace(asserts=asserts, assert_fails=fails)


def ran(metrics: dict[str, float] | None, status: str = "succeeded") -> Outcome:
    return Outcome(status, None if status == "succeeded" else "boom", 1.0, None, None, metrics)


def test_a_passing_run_is_left_alone() -> None:
    done = ran({"rows": 3})
    assert checked(job("rows > 0"), done) == (done, None)
    assert checked(job(None), ran(None)) == (ran(None), None)


def test_a_failing_check_travels_with_the_completion() -> None:
    done = ran({"rows": 0})
    assert checked(job("rows > 0"), done) == (done, "rows > 0 (rows=0)")
    assert checked(job("rows > 0"), ran(None)) == (ran(None), "rows > 0 (rows not reported)")


def test_assert_fails_fails_the_run() -> None:
    outcome, why = checked(job("rows > 0", fails=True), ran({"rows": 0}))
    assert why is None
    assert (outcome.status, outcome.error) == ("failed", "assertion failed: rows > 0 (rows=0)")


def test_runs_that_did_not_succeed_are_not_checked() -> None:
    failed = ran({"rows": 0}, "failed")
    assert checked(job("rows > 0", fails=True), failed) == (failed, None)
