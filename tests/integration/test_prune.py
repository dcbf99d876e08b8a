"""Pruning against a real Postgres, with an explicit ``now``: exactly which runs a prune
removes (age, count per job, failures kept longer, a job's own retention), a dry run that
counts the same rows without deleting them, small batches and pages, the slot a job is
running, the shards given, alert events, the cluster config, and the node's pruner on its
own connection with its metrics."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from cluster.config.retention import Retention
from cluster.errors import InvalidInput, StoreError
from cluster.jobs.models import Job
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.config import read_config
from cluster.store.connect import Conn, connect
from cluster.store.housekeeping.pruning import prune, side_connection
from cluster.store.jobstore.store import JobStore
from cluster.store.queries import query
from cluster.store.side import SideConnection
from node.maintenance.pruner import Pruner
from node.metrics import build_registry
from node.state import NodeState
from node.stats import Stats
from tests.helpers import history
from tests.helpers.sessions import Opener

T0 = datetime(2026, 6, 1, tzinfo=UTC)
DAY = timedelta(days=1)
ALL = range(16)
FAILED = ("failed", "timed_out", "lost")


def ago(delta: timedelta) -> datetime:
    return T0 - delta


@pytest.fixture
async def side(store: JobStore, settings: ClusterSettings) -> Any:
    """A pruning connection, as ``pulse runs prune`` opens."""
    async with side_connection(settings, "test-prune/prune", statement_timeout_s=30).using() as s:
        yield s


@pytest.fixture
async def conn(store: JobStore, settings: ClusterSettings) -> Any:
    c = await connect(settings, "test-prune")
    try:
        yield c
    finally:
        await c.close()


async def add(store: JobStore, name: str, **kw: Any) -> Job:
    return await store.definitions.add(
        JobSpec.build(name, "@every 1s", "app.jobs:tick", **kw), now=T0
    )


async def put_runs(conn: Conn, job: Job, runs: Sequence[tuple[datetime, str]]) -> None:
    cur = conn.cursor()
    await cur.executemany(
        "INSERT INTO runs (job_id, tenant_id, job_name, scheduled_for, status, attempt)"
        " VALUES (%s, %s, %s, %s, %s, 1)",
        [(job.id, job.tenant, job.name, at, status) for at, status in runs],
    )


async def kept(conn: Conn) -> dict[str, list[tuple[datetime, str]]]:
    cur = await conn.execute(
        "SELECT job_name, scheduled_for, status FROM runs ORDER BY job_name, scheduled_for DESC"
    )
    found: dict[str, list[tuple[datetime, str]]] = {}
    for row in await cur.fetchall():
        found.setdefault(row["job_name"], []).append((row["scheduled_for"], row["status"]))
    return found


async def expected_by_rule(
    conn: Conn, retention: Retention
) -> dict[str, list[tuple[datetime, str]]]:
    """What the Python rule (cluster/config/retention.py) keeps of the rows there now."""
    cur = await conn.execute("SELECT name, keep_for_s, keep_runs FROM jobs")
    rules = {
        r["name"]: retention.for_job(r["keep_for_s"], r["keep_runs"]) for r in await cur.fetchall()
    }
    found: dict[str, list[tuple[datetime, str]]] = {}
    for name, rows in (await kept(conn)).items():
        for newer, (at, status) in enumerate(rows):
            if not rules[name].expired(status, (T0 - at).total_seconds(), newer):
                found.setdefault(name, []).append((at, status))
    return found


async def plant_mixed(store: JobStore, conn: Conn) -> None:
    """Four jobs whose expected survivors are spelled out in the test below."""
    await store.set_config("keep_for", "10d")
    await store.set_config("keep_failed_for", "20d")
    plain = await add(store, "plain")
    await put_runs(
        conn,
        plain,
        [(ago(k * DAY), FAILED[k % 3] if k % 4 == 0 else "succeeded") for k in range(30)],
    )
    short = await add(store, "short", keep_for="1h")
    await put_runs(
        conn,
        short,
        [(ago(timedelta(minutes=30 * k)), "skipped") for k in range(6)]
        + [(ago(2 * DAY), "failed")],
    )
    few = await add(store, "few", keep_runs=3)
    await put_runs(conn, few, [(ago(timedelta(minutes=k)), "succeeded") for k in range(10)])
    long = await add(store, "long", keep_for="60d")
    await put_runs(
        conn,
        long,
        [(ago(40 * DAY), "failed"), (ago(50 * DAY), "succeeded"), (ago(61 * DAY), "timed_out")],
    )


async def test_a_prune_removes_exactly_the_runs_past_their_retention(
    store: JobStore, conn: Conn
) -> None:
    await plant_mixed(store, conn)
    result = await store.prune(now=T0)
    left = await kept(conn)
    # Cluster keep_for 10d; failures (every 4th day here) for 20d.
    assert left["plain"] == [
        (ago(k * DAY), FAILED[k % 3] if k % 4 == 0 else "succeeded")
        for k in range(30)
        if k <= 10 or (k % 4 == 0 and k <= 20)
    ]
    # The job's keep_for (1h) replaces the cluster's; its failure is kept the longer 20d.
    assert left["short"] == [(ago(timedelta(minutes=30 * k)), "skipped") for k in range(3)] + [
        (ago(2 * DAY), "failed")
    ]
    # keep_runs 3: the three newest slots, however young the others.
    assert left["few"] == [(ago(timedelta(minutes=k)), "succeeded") for k in range(3)]
    # keep_for 60d is longer than keep_failed_for: failures are kept 60d too.
    assert left["long"] == [(ago(40 * DAY), "failed"), (ago(50 * DAY), "succeeded")]
    assert result.runs == 30 + 7 + 10 + 3 - sum(len(v) for v in left.values())
    # Nothing left to do: a second pass removes nothing.
    assert (await store.prune(now=T0)).runs == 0


async def test_the_sql_rule_is_the_python_rule(
    store: JobStore, conn: Conn, side: SideConnection
) -> None:
    """Random jobs, overrides and runs; pruned in tiny pages and batches."""
    rng = random.Random(11)
    await store.set_config("keep_runs", "25")
    for i in range(40):
        job = await add(
            store,
            f"j{i:02d}",
            keep_for=rng.choice([None, "1h", "3d", "45d", "200d"]),
            keep_runs=rng.choice([None, None, 1, 4, 60]),
        )
        slots = rng.sample(range(0, 150 * 24), rng.randint(0, 80))
        statuses = ["succeeded"] * 6 + ["failed", "timed_out", "lost", "skipped"]
        await put_runs(conn, job, [(ago(timedelta(hours=h)), rng.choice(statuses)) for h in slots])
    retention = Retention.from_config(await read_config(conn))
    expected = await expected_by_rule(conn, retention)
    before = sum(len(v) for v in (await kept(conn)).values())
    counted = await prune(side, retention, ALL, now=T0, dry_run=True, page_jobs=7)
    result = await prune(side, retention, ALL, now=T0, page_jobs=7, batch=13)
    assert await kept(conn) == expected
    assert result.runs == counted.runs == before - sum(len(v) for v in expected.values())
    assert result.runs > 100  # the data must give the rule something to do
    # Every statement deletes at most a batch (and one more pass prunes alert events).
    assert result.statements >= -(-result.runs // 13) + 1


async def test_a_dry_run_counts_without_deleting(store: JobStore, conn: Conn) -> None:
    await plant_mixed(store, conn)
    before = await kept(conn)
    counted = await store.prune(dry_run=True, now=T0)
    assert await kept(conn) == before
    assert counted.runs > 0
    assert (await store.prune(now=T0)).runs == counted.runs


async def test_one_statement_deletes_one_batch_oldest_first(store: JobStore, conn: Conn) -> None:
    job = await add(store, "big", keep_runs=1)
    await put_runs(conn, job, [(ago(timedelta(seconds=s)), "succeeded") for s in range(100)])
    params = {
        "now": T0,
        "shards": list(ALL),
        "keep_for_s": 1e9,
        "keep_failed_for_s": 1e9,
        "keep_runs": 1000,
        "max_keep_s": 1e10,
        "jobs": 10,
        "batch": 30,
        "from_id": job.id,
    }
    cur = await conn.execute(query("prune_runs"), params)
    row = await cur.fetchone()
    assert row is not None
    assert (row["removed"], row["chosen"], row["resume_id"]) == (30, 30, job.id)
    left = await kept(conn)
    assert [at for at, _ in left["big"]] == [ago(timedelta(seconds=s)) for s in range(70)]


async def test_the_slot_a_job_is_running_keeps_its_row(store: JobStore, conn: Conn) -> None:
    """An old slot retried now: its earlier attempt's row stays while the retry runs."""
    job = await add(store, "retried", keep_for="1h")
    old = ago(3 * DAY)
    await put_runs(conn, job, [(old, "succeeded"), (ago(2 * DAY), "succeeded")])
    await conn.execute(
        "UPDATE jobs SET status = 'running', slot_at = %s, locked_by = 'n1' WHERE id = %s",
        (old, job.id),
    )
    assert (await store.prune(dry_run=True, now=T0)).runs == 1
    assert (await store.prune(now=T0)).runs == 1
    assert (await kept(conn))["retried"] == [(old, "succeeded")]
    await conn.execute("UPDATE jobs SET status = 'idle' WHERE id = %s", (job.id,))
    assert (await store.prune(now=T0)).runs == 1


async def test_only_the_given_shards_are_pruned(
    store: JobStore, conn: Conn, side: SideConnection
) -> None:
    jobs = [await add(store, f"s{i}", keep_for="1h") for i in range(12)]
    for job in jobs:
        await put_runs(conn, job, [(ago(DAY), "succeeded"), (T0, "succeeded")])
    mine = {j.shard for j in jobs[:6]}
    # Pages of two jobs with runs, of any shard: some hold none of ours.
    result = await prune(side, Retention(), mine, now=T0, page_jobs=2)
    left = await kept(conn)
    for job in jobs:
        assert len(left[job.name]) == (1 if job.shard in mine else 2), job.shard
    assert result.runs == sum(1 for j in jobs if j.shard in mine)
    assert (await prune(side, Retention(), (), now=T0)).runs == 0


async def test_a_prune_in_flight_holds_up_neither_claims_nor_completions(
    store: JobStore, conn: Conn, open_session: Opener
) -> None:
    """A prune statement holds row locks on the old runs it deletes until it commits; the
    claim and the completion of the jobs' current slots touch none of them."""
    await history.add(store, *(history.every_10s(f"h{i}", keep_for="1h") for i in range(4)))
    for job in await store.jobs():
        await put_runs(conn, job, [(history.at(-k * 3600), "succeeded") for k in range(2, 6)])
    node = await open_session("n1", "z")
    retention = Retention.from_config(await read_config(conn))
    async with conn.transaction():
        params = {
            "now": history.at(10),
            "shards": list(ALL),
            "keep_for_s": retention.keep_for_s,
            "keep_failed_for_s": retention.keep_failed_for_s,
            "keep_runs": retention.keep_runs,
            "max_keep_s": 1e10,
            "jobs": 200,
            "batch": 500,
            "from_id": UUID(int=0),
        }
        cur = await conn.execute(query("prune_runs"), params)
        assert (await cur.fetchone() or {})["removed"] == 16  # locked, not committed yet
        claimed = (await asyncio.wait_for(node.claim(ALL, 10, 30.0, now=history.at(10)), 3)).jobs
        assert len(claimed) == 4
        done = [history.finish(job) for job in claimed]
        applied = await asyncio.wait_for(node.completions.complete(done, now=history.at(11)), 3)
        assert applied == {job.id for job in claimed}
    left = await kept(conn)
    assert {name: [at for at, _ in rows] for name, rows in left.items()} == {
        f"h{i}": [history.at(10)] for i in range(4)
    }


async def test_alert_events_go_once_old_and_done(store: JobStore, conn: Conn) -> None:
    await store.set_config("keep_failed_for", "7d")
    await conn.execute(
        "INSERT INTO alert_rules (name, url, events) VALUES ('ops', 'http://x', '{failed}')"
    )
    cases = {  # name: (age, statuses of its deliveries, expected to go)
        "old-delivered": (8 * DAY, ["delivered", "failed"], True),
        "old-none": (8 * DAY, [], True),
        "old-pending": (8 * DAY, ["delivered", "pending"], False),
        "new-delivered": (6 * DAY, ["delivered"], False),
    }
    await conn.execute(
        "INSERT INTO alert_rules (name, url, events) VALUES ('dev', 'http://y', '{failed}')"
    )
    for name, (age, statuses, _) in cases.items():
        cur = await conn.execute(
            "INSERT INTO alert_events (event, tenant_id, job_name, created_at)"
            " VALUES ('failed', 'default', %s, %s) RETURNING id",
            (name, ago(age)),
        )
        event = await cur.fetchone()
        assert event is not None
        for rule, status in zip(["ops", "dev"], statuses, strict=False):
            await conn.execute(
                "INSERT INTO alert_deliveries (event_id, rule_name, status) VALUES (%s, %s, %s)",
                (event["id"], rule, status),
            )
    assert (await store.prune(dry_run=True, now=T0)).alert_events == 2
    assert (await store.prune(now=T0)).alert_events == 2
    cur = await conn.execute("SELECT job_name FROM alert_events ORDER BY 1")
    assert [r["job_name"] for r in await cur.fetchall()] == ["new-delivered", "old-pending"]
    cur = await conn.execute("SELECT count(*) AS n FROM alert_deliveries")
    assert await cur.fetchone() == {"n": 3}


async def test_init_seeds_the_defaults_and_never_overwrites(store: JobStore) -> None:
    assert {k: v for k, v, _ in await store.config()} == Retention().to_config()
    assert await store.set_config("keep_for", "168h") == "7d"
    await store.init()
    assert {k: v for k, v, _ in await store.config()} == {
        "keep_for": "7d",
        "keep_runs": "1000",
        "keep_failed_for": "90d",
    }


async def test_a_bad_value_is_not_stored(store: JobStore) -> None:
    before = await store.config()
    for key, value in (("keep_for", "0s"), ("keep_runs", "0"), ("nope", "1d")):
        with pytest.raises(InvalidInput) as caught:
            await store.set_config(key, value)
        assert caught.value.field == key
    assert await store.config() == before


async def test_the_node_pruner_prunes_its_held_shards_on_its_own_connection(
    store: JobStore, conn: Conn, settings: ClusterSettings
) -> None:
    jobs = [await add(store, f"n{i}", keep_for="1h") for i in range(10)]
    for job in jobs:
        await put_runs(
            conn, job, [(ago(DAY), "succeeded"), (ago(2 * DAY), "succeeded"), (T0, "succeeded")]
        )
    held = frozenset(j.shard for j in jobs[:5])
    state = NodeState("n1", "z", 16, held=held)
    stats = Stats()
    pruner = Pruner(
        side_connection(settings, "n1/prune", statement_timeout_s=5), state, stats, interval_s=30
    )
    try:
        removed = await pruner.run_once(now=T0)
        cur = await conn.execute(
            "SELECT application_name FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name LIKE 'n1%%'"
        )
        names = {r["application_name"] for r in await cur.fetchall()}
        assert names == {"n1/prune"}  # never a name that counts as the node's lock session
        assert removed == stats.runs_pruned == 2 * sum(1 for j in jobs if j.shard in held)
        assert stats.runs_table_bytes is not None and stats.runs_table_bytes > 0
        await conn.execute("ANALYZE runs")
        await pruner.run_once(now=T0)
    finally:
        await pruner.close()  # after its last pass: a pass opens the connection again
    assert stats.runs_table_rows is not None and stats.runs_table_rows > 0
    samples = {
        s.name: s.value
        for family in text_string_to_metric_families(
            generate_latest(build_registry(stats, lambda: state, lambda: 0)).decode()
        )
        for s in family.samples
    }
    assert samples["pulse_runs_pruned_total"] == removed
    assert samples["pulse_runs_table_rows"] == stats.runs_table_rows
    assert samples["pulse_runs_table_bytes"] == stats.runs_table_bytes


async def test_the_pruner_deletes_nothing_under_a_bad_config_value(
    store: JobStore, conn: Conn, settings: ClusterSettings
) -> None:
    job = await add(store, "j", keep_for="1h")
    await put_runs(conn, job, [(ago(DAY), "succeeded")])
    await conn.execute("UPDATE config SET value = 'forever' WHERE key = 'keep_for'")
    state = NodeState("n1", "z", 16, held=frozenset(ALL))
    pruner = Pruner(
        side_connection(settings, "n1/prune", statement_timeout_s=5), state, Stats(), interval_s=30
    )
    try:
        with pytest.raises(InvalidInput) as caught:
            await pruner.run_once(now=T0)
    finally:
        await pruner.close()
    assert caught.value.field == "keep_for"
    assert len((await kept(conn))["j"]) == 1


async def test_the_pruner_reconnects_after_its_connection_is_lost(
    store: JobStore, conn: Conn, settings: ClusterSettings
) -> None:
    job = await add(store, "j", keep_for="1h")
    state = NodeState("n1", "z", 16, held=frozenset(ALL))
    stats = Stats()
    pruner = Pruner(
        side_connection(settings, "n1/prune", statement_timeout_s=5), state, stats, interval_s=30
    )
    try:
        assert await pruner.run_once(now=T0) == 0
        await conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = 'n1/prune' AND datname = current_database()"
        )
        await put_runs(conn, job, [(ago(DAY), "succeeded")])
        with pytest.raises(StoreError):
            await pruner.run_once(now=T0)  # finds its connection gone, and drops it
        assert stats.db_errors == 1
        assert await pruner.run_once(now=T0) == 1  # a new connection
    finally:
        await pruner.close()


async def test_an_unreachable_database_is_an_error_without_the_password(
    settings: ClusterSettings,
) -> None:
    gone = ClusterSettings(
        database_url="postgresql://postgres:s3cret-pw@127.0.0.1:1/nowhere", schema="x"
    )
    stats = Stats()
    state = NodeState("n1", "z", 16, held=frozenset(ALL))
    pruner = Pruner(
        side_connection(gone, "n1/prune", statement_timeout_s=2), state, stats, interval_s=30
    )
    with pytest.raises(StoreError) as caught:
        await pruner.run_once()
    assert "s3cret" not in str(caught.value) and "***" in str(caught.value)
    assert stats.db_errors == 1


async def test_chain_slots_taken_long_ago_are_pruned_never_one_a_downstream_waits_for(
    store: JobStore, conn: Conn
) -> None:
    """Issue 50: chain_slots grew for ever. A taken slot goes once it is older than
    keep_failed_for and its run is gone; a queued one, the job's own and one whose run is
    kept stay, so a second release of them still makes no second slot."""
    await store.definitions.apply(
        [JobSpec.build("a", "@every 10s", "app.jobs:tick"),
         JobSpec.build("b", "@after:a", "app.jobs:tick", keep_for="200d")], now=T0,
    )  # fmt: skip
    b = await store.get("b")
    old, recent = ago(100 * DAY), ago(DAY)
    rows = {  # slot: (taken, created_at)
        ago(100 * DAY): (True, old),  # ran, its run pruned: goes
        ago(99 * DAY): (True, old),  # its run is kept (b's keep_for): stays
        ago(98 * DAY): (False, old),  # queued: b still waits for it
        ago(97 * DAY): (True, old),  # b's current slot (held at its gate)
        ago(DAY): (True, recent),  # taken lately: stays
    }
    for slot, (taken, created) in rows.items():
        await conn.execute(
            "INSERT INTO chain_slots (job_id, slot, taken, created_at) VALUES (%s, %s, %s, %s)",
            (b.id, slot, taken, created),
        )
    await put_runs(conn, b, [(ago(99 * DAY), "succeeded")])
    await conn.execute("UPDATE jobs SET slot_at = %s WHERE id = %s", (ago(97 * DAY), b.id))
    assert (await store.prune(dry_run=True, now=T0)).chain_slots == 1
    assert (await store.prune(now=T0)).chain_slots == 1
    cur = await conn.execute("SELECT slot FROM chain_slots ORDER BY slot")
    assert [r["slot"] for r in await cur.fetchall()] == sorted(rows)[1:]
    assert (await store.prune(now=T0)).chain_slots == 0
