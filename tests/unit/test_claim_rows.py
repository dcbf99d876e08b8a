"""Claimed jobs are built by position from the claim's rows: fields land where they belong,
a report-only row yields no job, and a row of the wrong width is refused."""

from __future__ import annotations

import pytest

from cluster.store.lock.records import ClaimedJob, claimed_jobs
from tests.helpers.claimed import job


def test_rows_become_jobs_field_by_field() -> None:
    a, b = job("m:a", name="a"), job("m:b", name="b")._replace(payload={"k": 1}, attempt=3)
    report = ("db_now", "next_due")
    jobs = claimed_jobs([(*report, *a), (*report, *b)], 2)
    assert jobs == [a, b]
    assert all(type(j) is ClaimedJob for j in jobs)
    assert (jobs[1].name, jobs[1].payload, jobs[1].attempt) == ("b", {"k": 1}, 3)


def test_a_claim_that_took_nothing_yields_no_jobs() -> None:
    nothing = ("db_now", "next_due", *[None] * len(ClaimedJob._fields))
    assert claimed_jobs([nothing], 2) == []
    assert claimed_jobs([], 2) == []


def test_a_row_of_the_wrong_width_is_refused() -> None:
    row = ("db_now", "next_due", *job("m:a"), "extra")
    width = len(ClaimedJob._fields)
    with pytest.raises(ValueError, match=f"{width + 1} job fields, not {width}"):
        claimed_jobs([row], 2)
