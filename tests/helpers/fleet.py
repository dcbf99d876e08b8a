"""Real ``pulse node`` processes for end-to-end tests, and what they leave behind.

A ``Fleet`` is the test helper ``Nodes`` (each node against one test's schema and Redis
prefix, the witness handler writing to a file in the test's tmp dir, output in a log file,
its own process group) that also reads what the nodes did: the witness file and the
database. Tests wait on observable state (``until`` polls with a deadline), never on
fixed sleeps, and ``Fleet.close`` kills whatever is still running, whatever happened.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.rows import dict_row

from cluster.chaos.witness import Execution, read_witness
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from cluster.store.queries import query
from cluster.timing.instants import EPOCH, US, US_PER_S
from tests.helpers.nodes import Nodes
from tests.helpers.waiting import until


@dataclass
class Fleet(Nodes):
    drain_timeout: str = "10s"

    # -- what the nodes did -----------------------------------------------------------

    def executions(self) -> list[Execution]:
        return read_witness(self.witness)

    def sql(self, statement: str | bytes, params: Any = None) -> list[dict[str, Any]]:
        with psycopg.connect(
            self.settings.database_url,
            autocommit=True,
            row_factory=dict_row,
            options=f"-c search_path={self.settings.schema}",
            application_name="e2e-observer",
        ) as conn:
            return conn.execute(statement, params).fetchall()  # type: ignore[arg-type]

    def holders(self) -> dict[int, str]:
        """Shard -> node id holding its advisory lock, as pg_locks shows it."""
        rows = self.sql(query("shard_holders"), {"ns": self.settings.lock_namespace})
        return {row["shard"]: row["node_id"] for row in rows}

    def shards_per_node(self) -> Counter[str]:
        return Counter(self.holders().values())

    def ended_runs(
        self, jobs: int, retried: str, attempts: int, what: str
    ) -> dict[str, dict[str, Any]]:
        """Wait until ``jobs`` jobs have a run that ended, ``retried``'s at attempt
        ``attempts`` or later; those runs rows by job name."""

        def ended() -> dict[str, dict[str, Any]] | None:
            self.check_alive()
            done = {
                r["job_name"]: r for r in self.sql("SELECT * FROM runs WHERE status <> 'running'")
            }
            if len(done) < jobs or done[retried]["attempt"] < attempts:
                return None
            return done

        return until(ended, what, 60)


def triggered(settings: ClusterSettings, jobs: list[JobSpec]) -> dict[str, str]:
    """Create the schema (16 shards), apply ``jobs`` and trigger each of them now; job name
    -> job id."""

    async def go() -> dict[str, str]:
        async with JobStore.open(settings) as store:
            await store.init(16)
            await store.definitions.apply(jobs)
            for spec in jobs:
                await store.trigger(spec.name)
            return {j.name: str(j.id) for j in await store.jobs()}

    return asyncio.run(go())


def every_slots(every_s: int, start: datetime, end: datetime) -> list[datetime]:
    """The ``@every <every_s>s`` slots in [start, end]: multiples of the interval since the
    Unix epoch."""
    step_us = every_s * US_PER_S
    first = -(-((start - EPOCH) // US) // step_us)
    last = ((end - EPOCH) // US) // step_us
    return [EPOCH + timedelta(seconds=i * every_s) for i in range(first, last + 1)]


def doubles(executions: Iterable[Execution]) -> list[tuple[str, datetime, int]]:
    """(job, slot) pairs executed more than once, with their count."""
    counts = Counter((e.job, e.slot) for e in executions)
    return sorted((job, slot, n) for (job, slot), n in counts.items() if n > 1)
