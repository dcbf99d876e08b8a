"""One-off jobs: ``@at <ISO 8601 with offset>`` has exactly one slot; its run makes the job
done (next_run_at NEVER), and catch-up runs it late (``once``) or skips it past the grace
(``skip``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cluster.errors import InvalidInput
from cluster.jobs.spec import JobSpec
from cluster.store.lock.records import NEVER, ClaimedJob
from cluster.timing.schedule import parse_schedule
from node.handlers.context import Outcome
from node.pipeline.outcomes import after_run, plan_at_claim
from tests.helpers.claimed import job

AT = datetime(2030, 1, 1, 9, 0, tzinfo=UTC)


def test_at_has_one_slot_and_keeps_the_offset_it_was_given() -> None:
    schedule = parse_schedule("@AT  2030-01-01T10:00:00+01:00")
    assert schedule.expr == "@at 2030-01-01T10:00:00+01:00"
    assert schedule.at == AT
    assert schedule.next_n(AT - timedelta(days=400), 3) == [AT]
    assert schedule.next_n(AT, 3) == []
    assert schedule.interval is None
    assert parse_schedule("@at 2030-01-01 09:00:00Z").at == AT


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("@at 2030-01-01T10:00:00", "needs a time with a UTC offset"),
        ("@at tomorrow", "needs an ISO 8601 time"),
        ("@at", "needs an ISO 8601 time"),
    ],
)
def test_bad_at_times_are_refused(expr: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        parse_schedule(expr)


def test_one_off_specs_refuse_jitter_and_overlap_allow() -> None:
    with pytest.raises(InvalidInput, match="nothing to spread"):
        JobSpec.build("j", "@at 2030-01-01T09:00:00Z", "shell:true", jitter="1s")
    with pytest.raises(InvalidInput, match="allow does not apply"):
        JobSpec.build("j", "@at 2030-01-01T09:00:00Z", "shell:true", overlap="allow")
    spec = JobSpec.build("j", "@at 2030-01-01T09:00:00Z", "shell:true", remove_when_done=True)
    assert spec.remove_when_done and spec.validated() == spec


def one_off(**fields: Any) -> ClaimedJob:
    return job("m:f")._replace(schedule="@at 2030-01-01T09:00:00+00:00", slot=AT, due=AT, **fields)


def test_a_run_makes_the_job_done_and_a_retry_comes_first() -> None:
    j = one_off()
    done, skips = after_run(j, Outcome("failed", "boom", 0.1), AT + timedelta(seconds=5))
    assert (done.next_run_at, done.next_slot, done.outcome, skips) == (NEVER, AT, "failed", [])
    retried, _ = after_run(one_off(retries=1), Outcome("failed", "boom", 0.1), AT)
    assert retried.next_run_at < NEVER and retried.next_attempt == 2


def test_catch_up_runs_a_missed_one_off_late_or_skips_it_past_the_grace() -> None:
    late = AT + timedelta(hours=3)
    assert plan_at_claim(one_off(catch_up="once"), late) is None
    assert plan_at_claim(one_off(catch_up="skip", grace_s=60.0), AT + timedelta(seconds=30)) is None
    skipped = plan_at_claim(one_off(catch_up="skip", grace_s=60.0), late)
    assert skipped is not None
    done, skips = skipped
    assert (done.outcome, done.next_run_at, done.next_slot, skips) == ("skipped", NEVER, AT, [])
    assert "missed by 3h" in (done.error or "")
