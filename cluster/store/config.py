"""The cluster's run-time settings, the ``config`` table (``pulse config``): text values
checked and parsed by ``cluster.config.keys`` before anything is written, and read by
nodes through a short-lived cache (``ConfigCache``)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from datetime import datetime

import psycopg

from cluster.config.keys import canonical
from cluster.errors import StoreError
from cluster.store.connect import Conn
from cluster.store.queries import query, store_error
from cluster.store.side import SideConnection

logger = logging.getLogger(__name__)

CACHE_TTL_S = 5.0


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


class ConfigCache:
    """A node's view of the ``config`` table, read at most every ``ttl_s`` on a side
    connection (the node's upkeep connection, opened on first use), so a ``pulse config
    set`` reaches every node within seconds without a query per request. When Postgres
    cannot be read, the last values read stay (none before the first read: every policy's
    strictest default)."""

    def __init__(self, side: SideConnection, *, ttl_s: float = CACHE_TTL_S) -> None:
        self._side = side
        self._ttl_s = ttl_s
        self._values: dict[str, str] = {}
        self._read_at: float | None = None
        self._lock = asyncio.Lock()

    async def values(self) -> dict[str, str]:
        async with self._lock:
            now = time.monotonic()
            if self._read_at is None or now - self._read_at >= self._ttl_s:
                self._read_at = now
                try:
                    rows = await self._side.fetch("config_rows")
                    self._values = {row["key"]: row["value"] for row in rows}
                except StoreError as exc:
                    logger.warning(
                        "cannot read the config table: %s", exc, extra={"event": "config_stale"}
                    )
            return self._values

    async def close(self) -> None:
        await self._side.close()
