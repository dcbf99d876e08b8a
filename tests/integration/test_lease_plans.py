"""The statements that end or extend leases (complete, renew, release) read the jobs they
name through the primary key, whatever the planner believes about running jobs; recovery
reads them through the due index, a probe per shard, and resets them by ctid.

The statistics of a jobs table are gathered while few jobs run, so the planner expects
``status = 'running'`` to match almost nothing; with hundreds running it used to scan the
table and re-read the batch for every running row. Here the statistics say nothing runs
while 3,000 jobs do, and each plan must reach ``jobs`` by ``jobs_pkey`` only.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import UUID

import pytest

from cluster.settings import ClusterSettings
from cluster.store.connect import connect
from cluster.store.jobstore.store import JobStore
from cluster.store.lock.records import Completion, complete_params
from cluster.store.queries import query
from tests.helpers.plans import FILL, job_scans, plan_of

T0 = datetime(2026, 1, 1, tzinfo=UTC)
JOBS = 3000
BATCH = 100

RUN_ALL = """
UPDATE jobs SET status = 'running', lease_token = 1, locked_by = 'n1', locked_at = %(t0)s,
                lease_expires_at = %(t0)s + interval '30 seconds'
"""


@pytest.mark.new_schema
async def test_lease_statements_read_jobs_by_primary_key_while_many_run(
    store: JobStore, settings: ClusterSettings
) -> None:
    conn = await connect(settings, "n1")
    try:
        # Statistics gathered while nothing runs, and kept: autovacuum would gather them
        # again after RUN_ALL, at a moment of its own.
        await conn.execute("ALTER TABLE jobs SET (autovacuum_enabled = false)")
        await conn.execute(FILL, {"n": JOBS, "t0": T0})
        await conn.execute("VACUUM ANALYZE jobs")  # statistics: nothing runs
        await conn.execute(RUN_ALL, {"t0": T0})
        cur = await conn.execute("SELECT id FROM jobs ORDER BY id LIMIT %(n)s", {"n": BATCH})
        ids: list[UUID] = [r["id"] for r in await cur.fetchall()]
        next_slot = T0 + timedelta(seconds=5)
        done = [Completion(i, 1, T0, "succeeded", None, 0.01, next_slot, next_slot, 1) for i in ids]
        leases = {"ids": ids, "tokens": [1] * BATCH, "now": T0}
        plans = {
            "complete": await plan_of(conn, "complete", complete_params(done, [], "n1", "z", T0)),
            "renew": await plan_of(conn, "renew", {**leases, "lease_s": 30.0}),
            "release": await plan_of(conn, "release", {**leases, "reason": "test"}),
        }
        shards = "{" + ",".join(map(str, range(0, 256, 3))) + "}"  # a node's third
        recover = {
            "own": False, "shards": shards, "live": ["n2"], "node_id": "n1", "zone": "z",
            "lease_s": 30.0, "now": T0,
        }  # fmt: skip
        recoveries = [
            await plan_of(conn, "recover", recover),
            # As a node sends it: the database's clock, which the planner cannot bound.
            await plan_of(conn, "recover", {**recover, "now": None}),
        ]
        async with conn.transaction(force_rollback=True):
            cur = await conn.execute(query("complete"), complete_params(done, [], "n1", "z", T0))
            applied = {r["id"] for r in await cur.fetchall()}
    finally:
        await conn.close()
    for name, plan in plans.items():
        scans = job_scans(plan)
        assert scans, name
        assert all(index == "jobs_pkey" for _, index in scans), (name, scans)
    assert applied == set(ids)
    # Recovery finds running jobs through the due index of its shards and resets the rows
    # it locked by their ctids: never a scan of the table.
    for recovery in recoveries:
        scans = job_scans(recovery)
        assert scans and all(index == "jobs_due" or scan == "Tid Scan" for scan, index in scans), (
            scans
        )
