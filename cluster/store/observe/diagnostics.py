"""Statements for tools that watch a cluster from outside (the chaos harness, tests):
sampling shard holders, ending a node's backends, counting jobs behind, reading the lease
token of each run row, dropping a schema.
Diagnostic only; the nodes' own statements are in ``sql/*.sql``."""

from __future__ import annotations

from datetime import datetime

import psycopg
from psycopg import sql

from cluster.errors import StoreError
from cluster.settings import ClusterSettings
from cluster.store.connect import connect, describe
from cluster.store.side import SideConnection

TERMINATE = b"""
SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) AS n FROM pg_stat_activity
WHERE (application_name = %(node)s OR starts_with(application_name, %(prefix)s))
  AND datname = current_database()
"""

BEHIND = b"""
SELECT count(*)::int AS n FROM jobs WHERE status <> 'paused' AND slot_at <= %(until)s
"""

RUN_TOKENS = b"SELECT job_name, scheduled_for, lease_token FROM runs"


async def shard_holders(side: SideConnection) -> dict[int, str] | None:
    """Shard -> holding node id, from ``pg_locks``; ``None`` when Postgres cannot be read
    right now (``side`` opens again at the next call)."""
    try:
        rows = await side.fetch("shard_holders", {"ns": side.settings.lock_namespace})
    except StoreError:
        return None
    return {row["shard"]: row["node_id"] for row in rows}


async def terminate_backends(settings: ClusterSettings, node_id: str, app: str) -> int:
    """``pg_terminate_backend`` on every connection of ``node_id`` to this database (a
    namesake in another database is another cluster's node); how many ended."""
    conn = await connect(settings, app, statement_timeout_s=5)
    try:
        cur = await conn.execute(TERMINATE, {"node": node_id, "prefix": f"{node_id}/"})
        row = await cur.fetchone()
        return int(row["n"]) if row else 0
    finally:
        await conn.close()


async def jobs_behind(settings: ClusterSettings, until: datetime, app: str) -> int | None:
    """Jobs (not paused) whose current slot is at or before ``until``; None if Postgres
    cannot be read right now (it may be restarting)."""
    try:
        conn = await connect(settings, app, statement_timeout_s=5)
        try:
            cur = await conn.execute(BEHIND, {"until": until})
            row = await cur.fetchone()
        finally:
            await conn.close()
    except (StoreError, psycopg.Error, OSError):
        return None
    return int(row["n"]) if row else 0


async def run_tokens(settings: ClusterSettings, app: str) -> dict[tuple[str, datetime], int]:
    """(job name, slot) -> the lease (fencing) token of the slot's run row: the token of
    the write that recorded its last outcome."""
    conn = await connect(settings, app, statement_timeout_s=60)
    try:
        cur = await conn.execute(RUN_TOKENS)
        return {(r["job_name"], r["scheduled_for"]): r["lease_token"] for r in await cur.fetchall()}
    finally:
        await conn.close()


async def drop_schema(settings: ClusterSettings, app: str) -> None:
    conn = await connect(settings, app, statement_timeout_s=30)
    try:
        await conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(settings.schema))
        )
    finally:
        await conn.close()


async def accepts_queries(url: str, connect_timeout_s: int = 2) -> str | None:
    """None once a server at ``url`` accepts a connection, else the reason it did not."""
    try:
        conn = await psycopg.AsyncConnection.connect(url, connect_timeout=connect_timeout_s)
    except psycopg.Error as exc:
        return describe(exc)
    await conn.close()
    return None
