"""The claim statement at scale: its plan (EXPLAIN), the rows it reads, and exactness.

200,000 jobs in 256 shards are made with one INSERT ... SELECT generate_series; a node of a
3-node ring claims over its ~85 shards. The claim must read the per-shard due index
(jobs_due) in a loop over the held shards, never scan the table, never sort every due
row, and read only a bounded number of rows whatever is due in other nodes' shards.
Timings are printed (run with -s), not asserted: the test machine is shared.
"""

from __future__ import annotations

import asyncio
import random
import secrets
import statistics
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from cluster.settings import ClusterSettings
from cluster.store.connect import Conn, connect
from cluster.store.jobstore.store import JobStore
from cluster.store.lock import session
from cluster.store.queries import query, variant
from ring import Ring
from tests.helpers.plans import walk_with_parents

T0 = datetime(2026, 1, 1, tzinfo=UTC)
JOBS = 200_000
SHARDS = 256
LIMIT = 100

# Job g is in shard g % 256 and due at T0 + ((g * 7919) % 7200 - 3600) s: half the jobs
# (100,000) are due at T0, spread over the last hour, in every shard.
FILL = """
INSERT INTO jobs (id, name, schedule, handler, shard_id, next_run_at, slot_at)
SELECT gen_random_uuid(), 'bulk-' || g, '@every 1h', 'cluster.chaos.witness:record', g %% 256,
       t.at, t.at
FROM generate_series(1, %(n)s) AS g
CROSS JOIN LATERAL (
    SELECT %(t0)s::timestamptz + ((g * 7919) %% 7200 - 3600) * interval '1 second' AS at
) AS t
"""


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


async def _fill(settings: ClusterSettings) -> None:
    async with JobStore.open(settings) as store:
        await store.init(shards=SHARDS)
    conn = await connect(settings, "fill", statement_timeout_s=300)
    try:
        async with conn.transaction():
            # No revision per bulk row: the plan tests read jobs only, and the trigger would
            # make the fill several times slower.
            await conn.execute("SET LOCAL session_replication_role = replica")
            await conn.execute(FILL, {"n": JOBS, "t0": T0})
        await conn.execute("VACUUM ANALYZE jobs")
    finally:
        await conn.close()


@pytest.fixture(scope="module")
def big_settings(database_url: str) -> Iterator[ClusterSettings]:
    """One 200k-job schema for the whole module (each worker builds its own); tests roll back."""
    tag = secrets.token_hex(4)
    settings = ClusterSettings(database_url=database_url, schema=f"plan_{tag}", cluster=tag)
    asyncio.run(_fill(settings))
    yield settings
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(settings.schema)))


@pytest.fixture
async def big(big_settings: ClusterSettings) -> AsyncIterator[Conn]:
    conn = await connect(big_settings, "n1", statement_timeout_s=60)
    try:
        yield conn
    finally:
        await conn.close()


def held_shards() -> list[int]:
    return sorted(Ring(["n1", "n2", "n3"]).owned("n1", SHARDS))


def claim_params(shards: list[int], limit: int = LIMIT) -> dict[str, Any]:
    return session.claim_params(shards, limit, 30.0, "n1", "z", T0)


async def explain(conn: Conn, params: dict[str, Any]) -> dict[str, Any]:
    """EXPLAIN ANALYZE the claim (it runs, so it is rolled back)."""
    async with conn.transaction(force_rollback=True):
        cur = await conn.execute(
            b"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "
            + variant("claim", "fair", bool(params.pop("fair", False))),
            params,
        )
        row = await cur.fetchone()
    assert row is not None
    plan: dict[str, Any] = row["QUERY PLAN"][0]
    return plan


def jobs_rows_read(plan: dict[str, Any]) -> int:
    """Rows every scan of the jobs table produced or threw away, over all its loops."""
    total = 0
    for node, _ in walk_with_parents(plan["Plan"]):
        if node.get("Relation Name") == "jobs" and "Scan" in node["Node Type"]:
            rows = node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
            total += rows * node["Actual Loops"]
    return int(total)


def assert_per_shard_plan(plan: dict[str, Any]) -> None:
    nodes = list(walk_with_parents(plan["Plan"]))
    assert not [
        n for n, _ in nodes if n["Node Type"] == "Seq Scan" and n.get("Relation Name") == "jobs"
    ], "the claim scans the whole jobs table"
    per_shard = [
        n
        for n, parents in nodes
        if n["Node Type"] in ("Index Scan", "Index Only Scan")
        and n.get("Index Name") == "jobs_due"
        and any(
            p["Node Type"] == "Nested Loop"
            and any(
                c["Node Type"] == "Function Scan" and c.get("Function Name") == "unnest"
                for c in p["Plans"]
            )
            for p in parents
        )
    ]
    assert per_shard, "the claim does not read jobs_due shard by shard"


async def test_claim_plan_reads_the_due_index_shard_by_shard(big: Conn) -> None:
    held = held_shards()
    assert 60 <= len(held) <= 110
    plan = await explain(big, claim_params(held))
    assert_per_shard_plan(plan)
    # About 33,000 jobs are due in the held shards; the claim reads a few hundred rows
    # (each shard's oldest few, then the candidates again to lock them), and any sort it
    # does is over those candidates, never over the due rows.
    read = jobs_rows_read(plan)
    assert read <= 3 * (len(held) * 3 + LIMIT), read
    for node, _ in walk_with_parents(plan["Plan"]):
        if node["Node Type"] == "Sort":
            assert node["Actual Rows"] <= len(held) * 3 + LIMIT, node["Actual Rows"]
    assert "JIT" not in plan  # a JIT compile would cost more than the claim itself
    print(
        f"\nclaim of {LIMIT} over {len(held)} of {SHARDS} shards, {JOBS} jobs: "
        f"{plan['Execution Time']:.1f} ms under EXPLAIN ANALYZE, {read} job rows read"
    )


async def fair_params(conn: Conn, held: list[int], limit: int = LIMIT) -> dict[str, Any]:
    """A fair claim's parameters, with the tenant list its lock session would keep."""
    row = await (await conn.execute(query("fair_tenants"), walk_params(held))).fetchone()
    assert row is not None
    pairs = {"pair_shards": row["shards"], "pair_tenants": row["tenants"],
             "pair_oldest": row["oldest"]}  # fmt: skip
    return {**session.claim_params(held, limit, 30.0, "n1", "z", T0, pairs=pairs), "fair": True}


def walk_params(held: list[int]) -> dict[str, Any]:
    return {"shards": held, "now": T0, "horizon_s": 1.0}


async def test_the_tenant_walk_probes_each_tenant_of_each_shard_once(big: Conn) -> None:
    """The fair claim's tenant list (docs/design/fairness.md): a loose scan of
    jobs_tenant_due, one step per tenant of each held shard and one that finds no more."""
    held = held_shards()
    async with big.transaction(force_rollback=True):
        cur = await big.execute(
            b"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query("fair_tenants"), walk_params(held)
        )
        row = await cur.fetchone()
    assert row is not None
    plan = row["QUERY PLAN"][0]
    steps = sum(
        int(node["Actual Loops"])
        for node, _ in walk_with_parents(plan["Plan"])
        if node.get("Index Name") == "jobs_tenant_due"
    )
    assert steps == 2 * len(held), steps  # one tenant here


async def test_a_fair_claim_reads_a_bounded_number_and_walks_no_tenants(big: Conn) -> None:
    """Fair, with the tenant list: besides the heads, the tenants' oldest due jobs in the
    shards picked for their turns; no step of the tenant walk."""
    held = held_shards()
    plan = await explain(big, await fair_params(big, held))
    assert_per_shard_plan(plan)
    read = jobs_rows_read(plan)  # one tenant here: about twice a plain claim's reads
    assert read <= 3 * (len(held) * 3 + LIMIT) + 4 * len(held), read
    walk = [n for n, _ in walk_with_parents(plan["Plan"]) if n.get("Index Name") ==
            "jobs_tenant_due" and "tenant_id >" in n.get("Index Cond", "")]  # fmt: skip
    assert not walk, walk
    print(f"\nfair claim of {LIMIT} over {len(held)} shards: {plan['Execution Time']:.1f} ms")


async def test_a_fair_claim_of_one_job_reads_a_tenant_in_few_of_its_shards(big: Conn) -> None:
    """One tenant due in every held shard, one free slot: the fair reads take its turn from
    at most two of its shards (share + 1), two rows in each, not a read in every shard
    (docs/design/fairness.md)."""
    held = held_shards()
    plain = jobs_rows_read(await explain(big, claim_params(held, 1)))
    fair = jobs_rows_read(await explain(big, await fair_params(big, held, 1)))
    assert fair <= plain + 2 * 2, (plain, fair)


def priority_probes(plan: dict[str, Any]) -> int:
    """Descents of jobs_priority_due over all their loops."""
    return sum(
        int(node["Actual Loops"])
        for node, _ in walk_with_parents(plan["Plan"])
        if node.get("Index Name") == "jobs_priority_due"
    )


async def test_a_claim_without_priorities_probes_their_index_once(big: Conn) -> None:
    """No job has a priority: one probe of the empty jobs_priority_due, not one per shard
    (docs/design/fairness.md, "Priorities")."""
    held = held_shards()
    for params in (claim_params(held), await fair_params(big, held)):
        plan = await explain(big, params)
        assert priority_probes(plan) == 1, priority_probes(plan)


async def test_a_claim_without_keys_reads_no_key_and_no_shard_past_its_heads(big: Conn) -> None:
    """No job uses a named limit: the keys' room is never read, nor any shard read again
    past the jobs waiting for a key (docs/design/limits.md, "What it costs")."""
    held = held_shards()
    for params in (claim_params(held), await fair_params(big, held)):
        plan = await explain(big, params)
        nodes = [n for n, _ in walk_with_parents(plan["Plan"])]
        keys = [n for n in nodes if n.get("Relation Name") in ("limit_keys", "limit_moves")]
        assert keys and all(n["Actual Loops"] == 0 for n in keys), keys
        past = [
            n for n in nodes if n.get("Relation Name") == "jobs" and "uses" in n.get("Filter", "")
        ]
        assert past and all(n["Actual Loops"] == 0 for n in past), past


async def test_a_claim_reads_each_priority_of_a_shard_once(big: Conn) -> None:
    """Jobs of priority 5 or 10 in the held shards, one of them in each: per shard, one step
    of the loose scan per priority present, one that finds no more, one due probe each."""
    held = held_shards()
    async with big.transaction(force_rollback=True):
        await big.execute(
            "UPDATE jobs SET priority = 5 + (shard_id %% 2) * 5 WHERE shard_id = ANY(%(held)s) "
            "AND id IN (SELECT id FROM jobs WHERE shard_id = ANY(%(held)s) "
            "ORDER BY next_run_at LIMIT 2000)",
            {"held": held},
        )
        plan = await explain(big, claim_params(held))
        cur = await big.execute(variant("claim", "fair", False), claim_params(held))
        claimed = [r for r in await cur.fetchall() if r["id"] is not None]
        cur = await big.execute("SELECT id FROM jobs WHERE priority > 0")
        prioritized = {r["id"] for r in await cur.fetchall()}
    assert priority_probes(plan) <= 1 + 3 * len(held), priority_probes(plan)
    # Every place of the claim went to a job with a priority: 2,000 of them are due.
    assert len(claimed) == LIMIT and {r["id"] for r in claimed} <= prioritized


async def test_claim_reads_nothing_of_other_nodes_backlog(big: Conn) -> None:
    """Nothing due in the held shards, 67,000 due elsewhere: the claim stays cheap."""
    held = held_shards()
    async with big.transaction(force_rollback=True):
        await big.execute(
            "UPDATE jobs SET next_run_at = %(t)s, slot_at = %(t)s WHERE shard_id = ANY(%(held)s)",
            {"t": at(600), "held": held},
        )
        plan = await explain(big, claim_params(held))
        cur = await big.execute(variant("claim", "fair", False), claim_params(held))
        rows = await cur.fetchall()
    assert_per_shard_plan(plan)
    # One probe of the due index per held shard, and one for its next due time.
    assert jobs_rows_read(plan) <= 2 * len(held), jobs_rows_read(plan)
    assert [r["id"] for r in rows] == [None] and rows[0]["next_due"] == at(600)


async def test_claim_takes_exactly_the_oldest_due_jobs(big: Conn) -> None:
    held = held_shards()
    params = claim_params(held)
    async with big.transaction(force_rollback=True):
        cur = await big.execute(
            "SELECT next_run_at FROM jobs WHERE status = 'idle' AND next_run_at <= %s "
            "AND shard_id = ANY(%s) ORDER BY next_run_at LIMIT %s",
            (T0, held, LIMIT),
        )
        expected = [r["next_run_at"] for r in await cur.fetchall()]
        cur = await big.execute(variant("claim", "fair", False), params)
        claimed = [r for r in await cur.fetchall() if r["id"] is not None]
    assert len(claimed) == LIMIT
    assert {r["shard_id"] for r in claimed} <= set(held)
    assert sorted(r["next_run_at"] for r in claimed) == expected


async def test_claim_timing_at_scale(big: Conn) -> None:
    """Claims over a node's shards (rolled back), printed: a full claim of 100 and of 32
    (the default concurrency), one over all 256 shards, and one with nothing due."""
    held = held_shards()
    report = []
    for label, shards, limit, now in (
        ("100 of 87 shards", held, 100, T0),
        ("32 of 87 shards", held, 32, T0),
        ("100 of 256 shards", list(range(SHARDS)), 100, T0),
        ("idle, 87 shards", held, 32, at(-7200)),
    ):
        samples = []
        for _ in range(9):
            async with big.transaction(force_rollback=True):
                started = time.perf_counter()
                cur = await big.execute(
                    variant("claim", "fair", False), {**claim_params(shards, limit), "now": now}
                )
                got = [r for r in await cur.fetchall() if r["id"] is not None]
                samples.append((time.perf_counter() - started) * 1000)
            assert len(got) == (0 if now < T0 else limit)
        report.append(f"{label}: median {statistics.median(samples):.1f} ms")
    print("\nclaim timings at 200k jobs: " + "; ".join(report))


async def test_claim_is_exact_oldest_first_under_skew_and_ties(
    store: JobStore, settings: ClusterSettings
) -> None:
    """Random, skewed, tie-heavy due times over 16 shards: every claim takes exactly the
    oldest due jobs of the shards it is given (ties in any order), whatever the limit."""
    conn = await connect(settings, "n1")
    rng = random.Random(7)
    try:
        await conn.execute(FILL.replace("256", "16"), {"n": 2000, "t0": T0})
        cur = await conn.execute("SELECT id, shard_id FROM jobs")
        rows = await cur.fetchall()
        hot = {3, 11}  # these shards hold most of the oldest jobs
        for row in rows:
            if row["shard_id"] in hot:
                due = at(-3600 + rng.choice([0, 0, 0, 5, 10]) + rng.random() * 60)
            else:
                due = at(rng.choice([-600, -300, -300, 0, 30]))  # many exact ties
            row["due"] = due
        async with conn.transaction():
            cur = conn.cursor()
            await cur.executemany(
                "UPDATE jobs SET next_run_at = %(due)s, slot_at = %(due)s WHERE id = %(id)s",
                rows,
            )
        for _ in range(40):
            shards = sorted(rng.sample(range(16), rng.randint(1, 16)))
            limit = rng.choice([1, 2, 7, 20, 50, 200])
            cur = await conn.execute(
                "SELECT next_run_at FROM jobs WHERE status = 'idle' AND next_run_at <= %s "
                "AND shard_id = ANY(%s) ORDER BY next_run_at LIMIT %s",
                (T0, shards, limit),
            )
            expected = [r["next_run_at"] for r in await cur.fetchall()]
            cur = await conn.execute(variant("claim", "fair", False), claim_params(shards, limit))
            claimed = [r for r in await cur.fetchall() if r["id"] is not None]
            assert {r["shard_id"] for r in claimed} <= set(shards)
            assert sorted(r["next_run_at"] for r in claimed) == expected, (shards, limit)
    finally:
        await conn.close()
