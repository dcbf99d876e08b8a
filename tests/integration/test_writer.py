"""The result writer: completions on their own connection, fenced, and self-healing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from cluster.errors import StoreError
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from cluster.store.lock.session import LockSession
from cluster.store.lock.writer import ResultWriter
from node.handlers.context import Outcome
from node.pipeline.outcomes import after_run

T0 = datetime(2026, 1, 1, tzinfo=UTC)
ALL = list(range(16))
OK = Outcome("succeeded", None, 0.01)


def _kill_writer(settings: ClusterSettings) -> None:
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = 'n1/write' AND datname = current_database()"
        )


async def test_writer_applies_fenced_completions_and_reconnects(
    store: JobStore, settings: ClusterSettings
) -> None:
    for name in ("a", "b"):
        await store.definitions.add(
            JobSpec.build(name, "@every 10s", "cluster.chaos.witness:record"), now=T0
        )
    session = LockSession(settings, "n1", "z", session_timeout_s=10, statement_timeout_s=5)
    writer = ResultWriter(settings, "n1", "z", statement_timeout_s=5)
    try:
        await session.open()
        await session.try_lock(ALL)
        first, second = (await session.claim(ALL, 10, 30.0, now=T0 + timedelta(seconds=10))).jobs
        done, skips = after_run(first, OK, T0 + timedelta(seconds=11))
        assert await writer.completions.complete([done], skips, now=T0 + timedelta(seconds=11)) == {
            first.id
        }
        # The same completion again is stale: the row is idle now.
        assert await writer.completions.complete([done], skips) == set()

        _kill_writer(settings)
        done2, skips2 = after_run(second, OK, T0 + timedelta(seconds=12))
        with pytest.raises(StoreError):
            await writer.completions.complete([done2], skips2)
        assert await writer.completions.complete([done2], skips2) == {second.id}  # a new connection
        assert {r.status for r in await store.runs()} == {"succeeded"}
    finally:
        await writer.close()
        await session.close()


async def test_writer_prepares_its_statement_and_recovers_from_a_refused_completion(
    store: JobStore, settings: ClusterSettings
) -> None:
    for name in ("a", "b"):
        await store.definitions.add(
            JobSpec.build(name, "@every 10s", "cluster.chaos.witness:record"), now=T0
        )
    session = LockSession(settings, "n1", "z", session_timeout_s=10, statement_timeout_s=5)
    writer = ResultWriter(settings, "n1", "z", statement_timeout_s=5)
    try:
        await session.open()
        first, second = (await session.claim(ALL, 10, 30.0, now=T0 + timedelta(seconds=10))).jobs
        done, _ = after_run(first, OK, T0 + timedelta(seconds=11))
        assert await writer.completions.complete([done]) == {first.id}

        # Refused by the server (runs.status has no such outcome): nothing of it is written.
        late, _ = after_run(second, OK, T0 + timedelta(seconds=11))
        with pytest.raises(StoreError, match="check constraint"):
            await writer.completions.complete([late._replace(outcome="exploded")])
        assert (await store.get(second.name)).status == "running"
        assert await writer.completions.complete([late]) == {second.id}
        assert await writer.completions.complete([late]) == set()  # fenced: the row is idle now
        assert {(r.job_name, r.status) for r in await store.runs()} == {
            ("a", "succeeded"),
            ("b", "succeeded"),
        }

        # One statement, prepared on the server at first use on this connection.
        assert writer._cur is not None
        cur = await writer._cur.connection.execute(
            "SELECT generic_plans + custom_plans AS runs FROM pg_prepared_statements"
            " WHERE statement LIKE 'WITH clock AS (%%'"
        )
        assert [row["runs"] for row in await cur.fetchall()] == [2]
    finally:
        await writer.close()
        await session.close()
