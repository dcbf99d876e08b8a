"""The benchmark's own database: created for one run, dropped at the end.

Every (scenario, system) pair gets a fresh Pulse schema inside it and its own cluster name
(so its Redis keys and lock namespace are its own too). Jobs are bulk-loaded with ``COPY``,
with ``shard_id`` from ``ring.shard_for`` exactly as the job store computes it.
"""

from __future__ import annotations

import json
import os
import secrets
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg
import redis.asyncio as aioredis
from psycopg import sql
from psycopg.rows import dict_row

from cluster.settings import DEFAULT_DATABASE_URL, DEFAULT_REDIS_URL, ClusterSettings
from cluster.store.jobstore.store import JobStore
from cluster.store.queries import query
from ring import Ring, shard_for

CONTROL_APP = "pulse-bench"
HANDLER = "cluster.chaos.witness:record"
# A lost attempt counts against a job's retries: with one, the slots the failover
# scenario's killed node had taken run again elsewhere, which is what it measures.
RETRIES = 1

AConn = psycopg.AsyncConnection[dict[str, Any]]


def _with_database(url: str, name: str) -> str:
    base, _, _ = url.partition("?")[0].rpartition("/")
    return f"{base}/{name}"


@dataclass
class BenchDatabase:
    """A ``pulse_bench_<random>`` database on the configured server."""

    admin_url: str
    name: str
    redis_url: str

    @classmethod
    def new(cls) -> BenchDatabase:
        admin = os.environ.get("PULSE_BENCH_ADMIN_URL") or os.environ.get(
            "PULSE_DATABASE_URL", DEFAULT_DATABASE_URL
        )
        redis_url = os.environ.get("PULSE_REDIS_URL", DEFAULT_REDIS_URL)
        return cls(admin, f"pulse_bench_{secrets.token_hex(4)}", redis_url)

    @property
    def url(self) -> str:
        return _with_database(self.admin_url, self.name)

    async def create(self) -> None:
        async with await psycopg.AsyncConnection.connect(self.admin_url, autocommit=True) as c:
            await c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.name)))

    async def drop(self) -> None:
        async with await psycopg.AsyncConnection.connect(self.admin_url, autocommit=True) as c:
            await c.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(self.name))
            )

    def cluster(self, schema: str, tag: str) -> ClusterSettings:
        return ClusterSettings(
            database_url=self.url,
            redis_url=self.redis_url,
            schema=schema,
            cluster=f"bench-{tag}",
        )


async def clear_redis(settings: ClusterSettings) -> None:
    client = aioredis.Redis.from_url(settings.redis_url)
    try:
        keys = [k async for k in client.scan_iter(match=settings.key_prefix + "*")]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


async def control(settings: ClusterSettings) -> AConn:
    """The benchmark's own connection (its backend is not counted as Postgres load).

    psycopg prepares nothing on it unless asked (the scale scenario sets
    ``prepare_threshold`` to time its claims as a node's lock session runs them)."""
    return await psycopg.AsyncConnection.connect(
        settings.database_url,
        autocommit=True,
        row_factory=dict_row,
        application_name=CONTROL_APP,
        # jit off, as on every connection of Pulse (cluster/store/connect.py): timed claims
        # must be planned and run as a node's are.
        options=f"-c search_path={settings.schema},public -c jit=off",
        prepare_threshold=None,
    )


async def init_schema(settings: ClusterSettings, shards: int) -> None:
    async with JobStore.open(settings, application_name=CONTROL_APP) as store:
        await store.init(shards)


def job_name(i: int) -> str:
    return f"j{i:07d}"


async def load_jobs(
    conn: AConn,
    count: int,
    schedule: str,
    shards: int,
    first: datetime,
    spread_s: float = 0.0,
    *,
    tenants: Sequence[str] = (),
    payload: dict[str, Any] | None = None,
) -> list[str]:
    """COPY ``count`` jobs running the witness handler; job ``i`` is first due at
    ``first + spread_s * i / count``, in tenant ``tenants[i]`` (``default`` without
    ``tenants``), with ``payload``. Returns the job names (unique across tenants)."""
    if tenants and len(tenants) != count:
        raise ValueError(f"{len(tenants)} tenants for {count} jobs")
    names = [job_name(i) for i in range(count)]
    columns = "id, tenant_id, name, schedule, handler, payload, shard_id, next_run_at, slot_at,"
    columns += " max_retries"
    body = json.dumps(payload or {})  # COPY's text format: jsonb reads it as is
    async with conn.cursor() as cur, cur.copy(f"COPY jobs ({columns}) FROM STDIN") as copy:
        for i, name in enumerate(names):
            job_id = uuid.uuid4()
            tenant = tenants[i] if tenants else "default"
            due = first + timedelta(seconds=spread_s * i / count) if spread_s else first
            shard = shard_for(job_id, shards)
            await copy.write_row(
                (job_id, tenant, name, schedule, HANDLER, body, shard, due, due, RETRIES)
            )
    await conn.execute("VACUUM ANALYZE jobs")
    return names


async def make_due(conn: AConn, at: datetime, schedule: str | None = None) -> datetime:
    """Every job's next slot becomes ``at`` (and its schedule ``schedule``, if given);
    chained jobs (``@after:``) have no clock and are left waiting for their upstreams.
    Returns the database time the update had committed by: a new schedule is a revision
    of every job, so on a busy machine this can come after ``at``."""
    await conn.execute(
        "UPDATE jobs SET next_run_at = %(t)s, slot_at = %(t)s,"
        " schedule = coalesce(%(s)s, schedule) WHERE schedule NOT LIKE '@after:%%'",
        {"t": at, "s": schedule},
    )
    cur = await conn.execute("SELECT clock_timestamp() AS t")
    row = await cur.fetchone()
    assert row is not None
    await conn.execute("VACUUM ANALYZE jobs")
    committed: datetime = row["t"]
    return committed


async def db_now(conn: AConn) -> datetime:
    cur = await conn.execute("SELECT now() AS t")
    row = await cur.fetchone()
    assert row is not None
    value = row["t"]
    assert isinstance(value, datetime)
    return value


async def unfinished(conn: AConn, last_slot: datetime) -> int:
    """Jobs whose slot at or before ``last_slot`` has not been completed yet (a one-off job
    that ran is ``done``, its slot left as it was)."""
    cur = await conn.execute(
        "SELECT count(*) AS n FROM jobs WHERE slot_at <= %(t)s AND status <> 'done'",
        {"t": last_slot},
    )
    row = await cur.fetchone()
    assert row is not None
    return int(row["n"])


async def backend_pids(conn: AConn, database: str) -> list[int]:
    """Postgres backends serving the benchmark database, except the benchmark's own."""
    cur = await conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = %(d)s AND application_name <> %(a)s",
        {"d": database, "a": CONTROL_APP},
    )
    return [int(r["pid"]) for r in await cur.fetchall()]


async def connected_apps(conn: AConn, database: str) -> set[str]:
    cur = await conn.execute(
        "SELECT DISTINCT application_name AS a FROM pg_stat_activity WHERE datname = %(d)s",
        {"d": database},
    )
    return {str(r["a"]) for r in await cur.fetchall()}


async def holders(conn: AConn, namespace: int) -> dict[int, str]:
    """Shard -> node id holding its advisory lock (``pg_locks``)."""
    cur = await conn.execute(query("shard_holders"), {"ns": namespace})
    return {int(r["shard"]): str(r["node_id"]) for r in await cur.fetchall()}


def owners(members: Sequence[str], shards: int) -> dict[int, str]:
    """Shard -> the member the ring over ``members`` says should hold it."""
    assignment = Ring(members).assignment(shards)
    return {shard: member for member, owned in assignment.items() for shard in owned}
