"""The cluster's run-time settings, the ``config`` table (``pulse config``): text values
checked and parsed by ``cluster.config.keys`` before anything is written."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

import psycopg

from cluster.config.keys import canonical
from cluster.store.connect import Conn
from cluster.store.queries import query, store_error


async def config_rows(conn: Conn) -> list[tuple[str, str, datetime]]:
    """Every stored (key, value, updated_at), by key."""
    try:
        cur = await conn.execute(query("config_rows"))
        rows = await cur.fetchall()
    except psycopg.Error as exc:
        raise store_error(exc) from exc
    return [(r["key"], r["value"], r["updated_at"]) for r in rows]


async def read_config(conn: Conn) -> dict[str, str]:
    return {key: value for key, value, _ in await config_rows(conn)}


async def write_config(conn: Conn, key: str, value: str) -> str:
    """Store ``value`` (checked, in its canonical form) under ``key``; the value stored.
    ``InvalidInput`` naming the key, with nothing written, if either is bad."""
    stored = canonical(key, value)
    try:
        await conn.execute(query("set_config"), {"key": key, "value": stored})
    except psycopg.Error as exc:
        raise store_error(exc) from exc
    return stored


async def seed_config(conn: Conn, defaults: Mapping[str, str]) -> None:
    """Store the keys of ``defaults`` not set yet; values already set stay."""
    try:
        await conn.execute(
            query("seed_config"), {"keys": list(defaults), "values": list(defaults.values())}
        )
    except psycopg.Error as exc:
        raise store_error(exc) from exc
