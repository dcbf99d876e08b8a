"""A bulk apply is set-wise: the statements it runs do not grow with its jobs, its batches
write each job once with one revision, and a file with several bad jobs reports the one
writing them in order meets first (cluster/store/jobstore/bulk.py). The figures:
``python -m bench.apply``."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from cluster.errors import InvalidInput
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.jobstore import bulk
from cluster.store.jobstore.scoped import ScopedConnection
from cluster.store.jobstore.store import JobStore

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def specs(count: int, schedule: str = "@every 1m") -> list[JobSpec]:
    return [
        JobSpec.build(f"j{i:03d}", schedule, "app.jobs:tick", payload={"n": i}, labels={"t": "a"})
        for i in range(count)
    ]


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The named statements the store runs, in order."""
    ran: list[str] = []
    one, all_ = ScopedConnection.one, ScopedConnection.all

    async def counted_one(self: ScopedConnection, name: str, params: dict[str, Any]) -> Any:
        ran.append(name)
        return await one(self, name, params)

    async def counted_all(self: ScopedConnection, name: str, params: dict[str, Any]) -> Any:
        ran.append(name)
        return await all_(self, name, params)

    monkeypatch.setattr(ScopedConnection, "one", counted_one)
    monkeypatch.setattr(ScopedConnection, "all", counted_all)
    yield ran


async def test_an_apply_runs_as_many_statements_for_a_hundred_jobs_as_for_ten(
    store: JobStore, statements: list[str]
) -> None:
    counts = []
    for count in (10, 100):
        for schedule in ("@every 1m", "@every 1m", "@every 2m"):  # create, same, reschedule
            statements.clear()
            await store.definitions.apply(specs(count, schedule), now=NOW)
            counts.append(len(statements))
        await store.definitions.apply([], prune=True, now=NOW)
    assert counts[:3] == counts[3:], (counts, statements)
    assert statements.count("upsert_jobs") == 1


async def test_batches_write_each_job_once_with_one_revision(
    store: JobStore, settings: ClusterSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bulk, "BATCH", 4)
    first = specs(10)
    up = JobSpec.build("up", "@every 1m", "app.jobs:tick")
    waits = JobSpec.build("waits", "@every 1m", "app.jobs:tick", after=("up",))
    result = await store.definitions.apply([up, *first, waits], now=NOW)
    assert len(result.created) == 12 and not result.updated
    again = await store.definitions.apply([up, *first, waits], now=NOW)
    assert len(again.unchanged) == 12 and not again.changed
    later = await store.definitions.apply([up, *specs(10, "@every 2m"), waits], now=NOW)
    assert later.updated == [s.name for s in first]
    assert later.unchanged == ["up", "waits"]
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        rows = conn.execute(
            f"SELECT job_name, revision, change, diff::text FROM {settings.schema}.job_revisions"
            " WHERE job_name = 'j007' ORDER BY revision"
        ).fetchall()
        edges = conn.execute(f"SELECT count(*) FROM {settings.schema}.job_edges").fetchone()
    assert [r[:3] for r in rows] == [("j007", 1, "created"), ("j007", 2, "updated")]
    assert rows[1][3] == '{"schedule": ["@every 1m", "@every 2m"]}'
    assert edges == (1,)
    assert (await store.get("j007")).revision == 2


async def test_a_file_with_two_bad_jobs_reports_the_first_and_writes_nothing(
    store: JobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bulk, "BATCH", 100)
    past = [NOW - timedelta(hours=h) for h in (2, 1)]
    bad = [
        JobSpec.build(f"once{i}", f"@at {t.isoformat()}", "app.jobs:tick")
        for i, t in enumerate(past)
    ]
    with pytest.raises(InvalidInput, match="@at 2026-06-01T10:00:00"):
        await store.definitions.apply([*specs(3), bad[0], *specs(6)[3:], bad[1]], now=NOW)
    assert await store.jobs() == []


async def test_a_batch_records_the_overdue_slots_each_of_its_jobs_is_moved_past(
    store: JobStore, settings: ClusterSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bulk, "BATCH", 2)
    await store.definitions.apply(specs(5), now=NOW)
    later = NOW + timedelta(minutes=3, seconds=30)  # slots 12:01, 12:02, 12:03 overdue
    result = await store.definitions.apply(specs(5, "@every 2m"), now=later)
    assert len(result.updated) == 5
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        rows = conn.execute(
            f"SELECT job_name, count(*) FROM {settings.schema}.runs WHERE status = 'skipped'"
            " GROUP BY job_name ORDER BY job_name"
        ).fetchall()
    assert rows == [(s.name, 3) for s in specs(5)]


async def test_an_overdue_batch_is_upserted_once_and_its_skips_recorded_in_one_statement(
    store: JobStore, settings: ClusterSettings, statements: list[str]
) -> None:
    """Where the upsert moves each overdue job is read from the rows it returns: no second,
    probing upsert (docs/design/revisions.md, "Bulk apply")."""
    await store.definitions.apply(specs(10), now=NOW)
    later = NOW + timedelta(minutes=2, seconds=30)  # slots 12:01 and 12:02 overdue
    statements.clear()
    result = await store.definitions.apply(specs(10, "@every 5m"), now=later)
    assert len(result.updated) == 10
    assert statements.count("upsert_jobs") == 1
    assert statements.count("record_skips_each") == 1
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        rows = conn.execute(
            f"SELECT job_name, scheduled_for FROM {settings.schema}.runs"
            " WHERE status = 'skipped' ORDER BY job_name, scheduled_for"
        ).fetchall()
    minute = timedelta(minutes=1)
    assert rows == [(s.name, NOW + n * minute) for s in specs(10) for n in (1, 2)]
