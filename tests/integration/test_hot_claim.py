"""The claim's update is heap-only (HOT), and paused jobs stay out of the due range.

No index of ``jobs`` names a column the claim writes, so Postgres can
update those rows in place without new index entries (migration 003). Paused jobs are kept
out of the claim's index range by a far-future ``next_run_at`` instead of an index
predicate on ``status``; these tests check that every path that pauses a job, or hands a
paused job's run back, sets it, and that trigger and resume bring the job back.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.connect import connect
from cluster.store.jobstore.store import JobStore
from node.handlers.context import Outcome
from node.pipeline.outcomes import after_run
from tests.helpers.sessions import Opener
from tests.helpers.waiting import until

T0 = datetime(2026, 1, 1, tzinfo=UTC)
ALL = list(range(16))
PAUSED_AT = datetime(9999, 1, 1, tzinfo=UTC)
LATER = T0 + timedelta(days=3650)  # every slot of every job is due by then

# What the claim writes (cluster/store/sql/claim.sql: claim).
CLAIM_WRITES = {
    "status", "locked_by", "locked_at", "locked_zone", "lease_expires_at", "lease_token",
    "updated_at",
}  # fmt: skip


async def rows(settings: ClusterSettings, sql: str, **params: Any) -> list[dict[str, Any]]:
    conn = await connect(settings, "observer")
    try:
        cur = await conn.execute(sql, params)
        return await cur.fetchall()
    finally:
        await conn.close()


async def stored(settings: ClusterSettings, name: str) -> tuple[str, datetime]:
    found = await rows(
        settings, "SELECT status, next_run_at FROM jobs WHERE name = %(name)s", name=name
    )
    return found[0]["status"], found[0]["next_run_at"]


async def test_no_index_of_jobs_names_a_column_the_claim_writes(
    settings: ClusterSettings, store: JobStore
) -> None:
    indexed = await rows(
        settings,
        """
        SELECT i.indexrelid::regclass::text AS index, a.attname AS col
        FROM pg_index i
        JOIN pg_attribute a ON a.attrelid = i.indrelid
        WHERE i.indrelid = 'jobs'::regclass AND a.attnum > 0
          AND (a.attnum = ANY(i.indkey)
               OR pg_get_expr(i.indpred, i.indrelid) ~ ('\\m' || a.attname || '\\M')
               OR pg_get_expr(i.indexprs, i.indrelid) ~ ('\\m' || a.attname || '\\M'))
        """,
    )
    assert indexed, "the catalog query found the indexes"
    assert {(r["index"], r["col"]) for r in indexed if r["col"] in CLAIM_WRITES} == set()


async def _hot_updates(settings: ClusterSettings) -> int:
    found = await rows(
        settings,
        "SELECT n_tup_hot_upd::int AS n FROM pg_stat_user_tables WHERE relid = 'jobs'::regclass",
    )
    return int(found[0]["n"])


async def test_the_claim_updates_job_rows_in_place(
    settings: ClusterSettings, store: JobStore, open_session: Opener
) -> None:
    specs = [
        JobSpec.build(f"job-{i:03d}", "@every 10s", "cluster.chaos.witness:record")
        for i in range(60)
    ]
    await store.definitions.apply(specs, now=T0)
    before = await _hot_updates(settings)
    a = await open_session("node-a")
    await a.try_lock(ALL)
    claimed = (await a.claim(ALL, 100, 30.0, now=T0 + timedelta(seconds=10))).jobs
    assert len(claimed) == 60
    await a.close()  # its backend publishes its table statistics as it exits

    # 60 updates on freshly filled pages with a fifth of their room free (fillfactor 80):
    # a good part fit beside their old version (16 here). With an index on status (the
    # version 2 schema) none could be HOT.
    async def hot() -> bool:
        return await _hot_updates(settings) - before >= 8

    await until(hot, "8 of the 60 claim updates to be HOT", 10, interval_s=0.05)


async def test_a_paused_job_is_never_claimed_until_triggered_or_resumed(
    settings: ClusterSettings, store: JobStore, open_session: Opener
) -> None:
    await store.definitions.add(
        JobSpec.build("tick", "@every 10s", "cluster.chaos.witness:record"), now=T0
    )
    await store.definitions.add(
        JobSpec.build("born-paused", "@every 10s", "cluster.chaos.witness:record", paused=True),
        now=T0,
    )
    await store.pause("tick")
    assert await stored(settings, "tick") == ("paused", PAUSED_AT)
    assert await stored(settings, "born-paused") == ("paused", PAUSED_AT)
    a = await open_session("node-a")
    await a.try_lock(ALL)
    idle = await a.claim(ALL, 100, 30.0, now=LATER)
    assert (idle.jobs, idle.next_due) == ([], None), "nothing due, and no marker as next due"

    # Triggered, a paused job runs once and goes back to its paused state.
    await store.trigger("tick", now=LATER)
    (job,) = (await a.claim(ALL, 100, 30.0, now=LATER)).jobs
    assert job.name == "tick"
    done, _ = after_run(job, Outcome("succeeded", None, 0.01), LATER)
    assert await a.completions.complete([done], now=LATER) == {job.id}
    assert await stored(settings, "tick") == ("paused", PAUSED_AT)

    # Resumed, it is due at its next slot again.
    resumed = await store.resume("tick", now=LATER)
    assert resumed.next_run_at is not None
    assert await stored(settings, "tick") == ("idle", resumed.next_run_at)
    (job,) = (await a.claim(ALL, 100, 30.0, now=resumed.next_run_at)).jobs
    assert job.name == "tick"


async def test_a_run_paused_in_flight_ends_paused_however_it_ends(
    settings: ClusterSettings, store: JobStore, open_session: Opener
) -> None:
    names = ["completed", "released", "recovered"]
    for name in names:
        # "recovered" has a retry left: a lost attempt counts against the retries (a last
        # attempt lost is recorded failed: test_poison.py).
        retries = 1 if name == "recovered" else 0
        spec = JobSpec.build(name, "@every 10s", "cluster.chaos.witness:record", retries=retries)
        await store.definitions.add(spec, now=T0)
    a = await open_session("node-a")
    await a.try_lock(ALL)
    claimed = {j.name: j for j in (await a.claim(ALL, 100, 30.0, now=LATER)).jobs}
    assert set(claimed) == set(names)
    for name in names:
        assert (await store.pause(name)).status == "running", "the run goes on"
        assert (await stored(settings, name))[1] < LATER, "a running job keeps its slot"

    job = claimed["completed"]
    done, _ = after_run(job, Outcome("failed", "boom", 0.01), LATER)
    assert await a.completions.complete([done], now=LATER) == {job.id}
    job = claimed["released"]
    assert await a.release([(job.id, job.lease_token)], "stopping", now=LATER) == {job.id}
    recovered = await a.recover(ALL, [], now=LATER + timedelta(minutes=5))  # lease expired
    assert [r["name"] for r in recovered] == ["recovered"]

    for name in names:
        assert await stored(settings, name) == ("paused", PAUSED_AT), name
    assert (await a.claim(ALL, 100, 30.0, now=LATER + timedelta(days=1))).jobs == []
