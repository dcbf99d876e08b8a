"""The common ground of the run-history tests: jobs added at ``T0``, rows read as they are
(the runs table itself, not the listing), and the completion of a claimed job."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.connect import connect
from cluster.store.jobstore.store import JobStore
from cluster.store.lock.records import ClaimedJob, Completion
from tests.helpers.sessions import T0
from tests.helpers.sessions import at as at  # the history tests count from T0 too


async def add(store: JobStore, *specs: JobSpec) -> None:
    """Jobs created at T0; with ``@every 10s`` each is first due at T0 + 10 s."""
    await store.definitions.apply(list(specs), now=T0)


def every_10s(name: str, **kw: Any) -> JobSpec:
    return JobSpec.build(name, "@every 10s", "cluster.chaos.witness:record", **kw)


async def rows(settings: ClusterSettings, sql: str, params: Any = None) -> list[dict[str, Any]]:
    conn = await connect(settings, "observer")
    try:
        cur = await conn.execute(sql.encode(), params)
        return await cur.fetchall()
    finally:
        await conn.close()


async def run_rows(settings: ClusterSettings) -> list[dict[str, Any]]:
    """The runs table itself (not the listing, which adds the attempts in flight)."""
    return await rows(settings, "SELECT * FROM runs ORDER BY job_name, scheduled_for")


def finish(
    job: ClaimedJob,
    outcome: str = "succeeded",
    *,
    error: str | None = None,
    duration_s: float | None = 0.25,
    retry_at: datetime | None = None,
) -> Completion:
    """The completion of ``job``: a retry of its slot at ``retry_at``, else its next slot."""
    if retry_at is not None:
        return Completion(
            job.id, job.lease_token, job.slot, outcome, error, duration_s, retry_at, job.slot,
            job.attempt + 1,
        )  # fmt: skip
    following = job.slot + timedelta(seconds=10)
    return Completion(
        job.id, job.lease_token, job.slot, outcome, error, duration_s, following, following, 1
    )
