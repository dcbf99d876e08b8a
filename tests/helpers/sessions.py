"""The common ground of the lock-session tests: time from a fixed ``T0`` (``at``), every
shard (``ALL``), jobs added at ``T0``, the completion the node would write, a job's run rows,
and ``LockSessions``, the ``open_session`` fixture's opener."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

from cluster.jobs.models import Job
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from cluster.store.lock.records import ClaimedJob, Completion
from cluster.store.lock.session import LockSession
from node.handlers.context import Outcome
from node.pipeline.outcomes import after_run

T0 = datetime(2026, 1, 1, tzinfo=UTC)
ALL = list(range(16))
OK = Outcome("succeeded", None, 0.01)
Opener = Callable[..., Awaitable[LockSession]]


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


class LockSessions:
    """Opens lock sessions (node id, zone) on one cluster's schema; ``close`` closes every
    one. Statements that take their shards as arguments need no shard locks."""

    def __init__(self, settings: ClusterSettings) -> None:
        self.settings = settings
        self.opened: list[LockSession] = []

    async def __call__(self, node_id: str, zone: str = "z") -> LockSession:
        session = LockSession(
            self.settings, node_id, zone, session_timeout_s=10, statement_timeout_s=5
        )
        await session.open()
        self.opened.append(session)
        return session

    async def close(self) -> None:
        for session in self.opened:
            await session.close()


async def add_jobs(
    store: JobStore, count: int, every: str = "@every 10s", retries: int = 1
) -> list[Job]:
    """``count`` jobs created at T0; with ``@every 10s`` each is first due at T0 + 10 s. One
    retry by default: a lost attempt counts against the retries, and these tests take lost
    slots back to run them again (a last attempt lost: tests/integration/test_poison.py)."""
    specs = [
        JobSpec.build(f"job-{i:04d}", every, "cluster.chaos.witness:record", retries=retries)
        for i in range(count)
    ]
    await store.definitions.apply(specs, now=T0)
    return await store.jobs()


def completion(job: ClaimedJob, now: datetime) -> Completion:
    done, _ = after_run(job, OK, now)
    return done


async def run_rows(store: JobStore, name: str) -> list[tuple[datetime, str, str | None, int]]:
    runs = await store.runs(job=name, limit=100)
    return sorted((r.scheduled_for, r.status, r.node_id, r.attempt) for r in runs)
