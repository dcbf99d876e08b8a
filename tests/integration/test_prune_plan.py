"""The prune statement's plan (EXPLAIN ANALYZE): per job of a page, probes of runs'
``(job_id, scheduled_for)`` index, never a scan of the runs table, and reads bounded by
the page's runs whatever the table holds elsewhere.

5,000 jobs in 256 shards with 40 runs each (200,000 runs) are made with INSERT ... SELECT;
the statement is explained over the shards one node of three holds. Timings are printed
(run with -s), not asserted: the test machine is shared.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import psycopg
import pytest
from psycopg import sql

from cluster.config.retention import MAX_KEEP_S
from cluster.settings import ClusterSettings
from cluster.store.connect import Conn, connect
from cluster.store.jobstore.store import JobStore
from cluster.store.queries import query
from ring import Ring
from tests.helpers.plans import walk_with_parents

T0 = datetime(2026, 1, 1, tzinfo=UTC)
JOBS = 5000
RUNS_PER_JOB = 40
SHARDS = 256
PAGE = 200
BATCH = 500

# Job g has a run every hour for the 40 hours before T0; every 5th run failed.
FILL = """
INSERT INTO jobs (id, name, schedule, handler, shard_id, next_run_at, slot_at)
SELECT gen_random_uuid(), 'bulk-' || g, '@every 1h', 'app.jobs:tick', g %% 256, %(t0)s, %(t0)s
FROM generate_series(1, %(n)s) AS g
"""
FILL_RUNS = """
INSERT INTO runs (job_id, tenant_id, job_name, scheduled_for, status)
SELECT j.id, j.tenant_id, j.name, %(t0)s::timestamptz - h * interval '1 hour',
       CASE WHEN h %% 5 = 0 THEN 'failed' ELSE 'succeeded' END
FROM jobs j CROSS JOIN generate_series(1, %(runs)s) AS h
"""


async def _fill(settings: ClusterSettings) -> None:
    async with JobStore.open(settings) as store:
        await store.init(shards=SHARDS)
    conn = await connect(settings, "fill", statement_timeout_s=300)
    try:
        await conn.execute(FILL, {"n": JOBS, "t0": T0})
        await conn.execute(FILL_RUNS, {"t0": T0, "runs": RUNS_PER_JOB})
        await conn.execute("VACUUM ANALYZE jobs")
        await conn.execute("VACUUM ANALYZE runs")
    finally:
        await conn.close()


@pytest.fixture(scope="module")
def big_settings(database_url: str) -> Iterator[ClusterSettings]:
    tag = secrets.token_hex(4)
    settings = ClusterSettings(database_url=database_url, schema=f"prune_{tag}", cluster=tag)
    asyncio.run(_fill(settings))
    yield settings
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(settings.schema)))


@pytest.fixture
async def big(big_settings: ClusterSettings) -> AsyncIterator[Conn]:
    conn = await connect(big_settings, "n1/prune", statement_timeout_s=60)
    await conn.execute(query("prune_setup"))  # as the node's pruning connection runs
    try:
        yield conn
    finally:
        await conn.close()


def held_shards() -> list[int]:
    return sorted(Ring(["n1", "n2", "n3"]).owned("n1", SHARDS))


def params(keep_for_s: float, keep_runs: int = 1000) -> dict[str, Any]:
    return {
        "now": T0,
        "shards": held_shards(),
        "keep_for_s": keep_for_s,
        "keep_failed_for_s": keep_for_s * 2,
        "keep_runs": keep_runs,
        "max_keep_s": MAX_KEEP_S,
        "jobs": PAGE,
        "batch": BATCH,
        "from_id": UUID(int=0),
    }


async def explain(conn: Conn, name: str, p: dict[str, Any]) -> dict[str, Any]:
    """EXPLAIN ANALYZE the statement (it runs, so it is rolled back)."""
    async with conn.transaction(force_rollback=True):
        cur = await conn.execute(b"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query(name), p)
        row = await cur.fetchone()
    assert row is not None
    plan: dict[str, Any] = row["QUERY PLAN"][0]
    return plan


def runs_scans(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [n for n, _ in walk_with_parents(plan["Plan"]) if n.get("Relation Name") == "runs"]


def runs_rows_read(plan: dict[str, Any]) -> int:
    """Rows every scan of runs produced or threw away, over all its loops."""
    total = 0
    for node in runs_scans(plan):
        if "Scan" in node["Node Type"] and node["Node Type"] != "Tid Scan":
            rows = node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
            total += rows * node["Actual Loops"]
    return int(total)


def assert_per_job_probes(plan: dict[str, Any]) -> None:
    scans = runs_scans(plan)
    assert not [n for n in scans if n["Node Type"] == "Seq Scan"], "a scan of the runs table"
    jobs = [n for n, _ in walk_with_parents(plan["Plan"]) if n.get("Relation Name") == "jobs"]
    assert jobs and all(n.get("Index Name") == "jobs_pkey" for n in jobs), "jobs not by id"
    # Only the page's jobs are read, not every job of the held shards.
    assert sum(n["Actual Rows"] * n["Actual Loops"] for n in jobs) <= PAGE
    # A bitmap scan would read every old entry of a job, dead or not, on every pass.
    assert not [n for n in scans if n["Node Type"] == "Bitmap Heap Scan"]
    probes = [
        n
        for n, parents in walk_with_parents(plan["Plan"])
        if n["Node Type"] in ("Index Scan", "Index Only Scan")
        and n.get("Index Name") == "runs_job_id_scheduled_for_key"
        and any(p["Node Type"] == "Nested Loop" for p in parents)
    ]
    # One probe for the keep_runs-th newest slot, one for the expired rows, per job.
    assert len(probes) >= 2, "runs are not read by (job_id, scheduled_for) per job"
    assert all(n["Actual Loops"] <= PAGE for n in probes), [n["Actual Loops"] for n in probes]


@pytest.mark.new_schema
async def test_prune_probes_each_jobs_runs_by_index(big: Conn) -> None:
    # keep_for 10h: 30 of each job's 40 runs are expired (failures: 20h), more than a batch.
    plan = await explain(big, "prune_runs", params(10 * 3600))
    assert_per_job_probes(plan)
    # The batch fills within the first jobs of the page: far fewer rows than the table.
    read = runs_rows_read(plan)
    assert read <= PAGE * RUNS_PER_JOB * 2, read
    assert "JIT" not in plan
    print(
        f"\nprune of a {BATCH}-row batch over {len(held_shards())} of {SHARDS} shards, "
        f"{JOBS * RUNS_PER_JOB} runs: {plan['Execution Time']:.1f} ms under EXPLAIN ANALYZE, "
        f"{read} run rows read"
    )


async def test_nothing_expired_reads_only_each_jobs_index_entries(big: Conn) -> None:
    """Retention longer than every run: the expiry probe finds nothing at its first entry,
    and the count probe reads each job's index entries (at most keep_runs)."""
    plan = await explain(big, "prune_runs", params(100 * 3600))
    assert_per_job_probes(plan)
    read = runs_rows_read(plan)
    assert read <= PAGE * (RUNS_PER_JOB + 1), read
    cur = await big.execute(query("prune_runs"), params(100 * 3600))
    row = await cur.fetchone()
    assert row is not None and row["removed"] == 0 and row["last_id"] is not None
    print(f"\nprune with nothing expired, a page of {PAGE} jobs: {plan['Execution Time']:.1f} ms")


async def test_the_count_probe_stops_at_keep_runs(big: Conn) -> None:
    """keep_runs 5 of 40: the count probe reads 5 entries per job, not the job's 40."""
    plan = await explain(big, "count_prunable_runs", params(100 * 3600, keep_runs=5))
    assert_per_job_probes(plan)
    newest = [
        n
        for n in runs_scans(plan)
        if n["Node Type"] in ("Index Scan", "Index Only Scan")
        and n.get("Scan Direction") == "Backward"
    ]
    assert newest and all(n["Actual Rows"] <= 5 for n in newest), [n["Actual Rows"] for n in newest]
    cur = await big.execute(query("count_prunable_runs"), params(100 * 3600, keep_runs=5))
    row = await cur.fetchone()
    # The page is the first 200 jobs with runs of every shard; those of the held shards count.
    cur = await big.execute(
        "SELECT count(*) AS n FROM (SELECT shard_id FROM jobs ORDER BY id LIMIT %s) AS j"
        " WHERE shard_id = ANY(%s)",
        (PAGE, held_shards()),
    )
    held = await cur.fetchone()
    assert row is not None and held is not None and 0 < held["n"] < PAGE
    assert row["chosen"] == held["n"] * (RUNS_PER_JOB - 5)
