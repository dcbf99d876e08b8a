"""The common ground of the flight tests: an overlap ``allow`` job, the completions that hand
a slot to a flight or end one, and the flights table as it is."""

from __future__ import annotations

from datetime import datetime

from cluster.jobs.spec import JobSpec
from cluster.store.jobstore.store import JobStore
from cluster.store.lock.records import ClaimedJob, Completion
from tests.helpers.sessions import T0, at

HANDLER = "cluster.chaos.witness:record"


async def allow_job(store: JobStore, retries: int = 3, limit: int = 2) -> None:
    spec = JobSpec.build(
        "fan", "@every 10s", HANDLER, overlap="allow", max_concurrent=limit, retries=retries
    )
    await store.definitions.apply([spec], now=T0)


def handed(job: ClaimedJob, next_slot: datetime) -> Completion:
    return Completion(
        job.id, job.lease_token, job.slot, "spawned", None, None, next_slot, next_slot, 1
    )


def ended(
    job: ClaimedJob, outcome: str = "succeeded", retry_at: datetime | None = None
) -> Completion:
    if retry_at is None:
        return Completion(
            job.id, job.lease_token, job.slot, outcome, None, 1.0, at(999), at(999), 1
        )
    return Completion(
        job.id, job.lease_token, job.slot, outcome, "boom", 1.0, retry_at, job.slot, job.attempt + 1
    )


async def flights(store: JobStore) -> list[tuple[datetime, str, int, str | None]]:
    conn = store.db.conn  # the test reads the table as it is
    cur = await conn.execute("SELECT slot, status, attempt, locked_by FROM flights ORDER BY slot")
    return [(r["slot"], r["status"], r["attempt"], r["locked_by"]) for r in await cur.fetchall()]
