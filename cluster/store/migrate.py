"""Schema migrations: numbered ``.sql`` files in ``cluster/store/migrations`` applied in order.

They run in one transaction under a transaction-scoped advisory lock keyed by the schema,
so ``pulse init`` is safe to run twice or from several processes at once. Applied versions
are recorded in ``schema_version``. The shard count is fixed by the first init and stored
in ``meta``; it never changes afterwards.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from importlib import resources

import psycopg
from psycopg import sql

from cluster.errors import InvalidInput, StoreError
from cluster.settings import DEFAULT_SHARDS
from cluster.store.connect import Conn, SchemaMissing, describe
from cluster.store.queries import store_error
from ring import validate_shard_count

logger = logging.getLogger(__name__)

_FILE = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    text: str


@dataclass(frozen=True)
class InitResult:
    applied: tuple[int, ...]
    version: int
    shards: int


def available() -> list[Migration]:
    found = []
    for entry in resources.files("cluster.store.migrations").iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text("utf-8")))
    return sorted(found, key=lambda m: m.version)


async def migrate(conn: Conn, schema: str, shards: int | None = None) -> InitResult:
    """Bring ``schema`` up to date; fix the shard count on first run."""
    if shards is not None:
        try:
            validate_shard_count(shards)
        except ValueError as exc:
            raise InvalidInput("shards", str(exc)) from exc
    try:
        async with conn.transaction():
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext('pulse.migrate'), hashtext(%(s)s))",
                {"s": schema},
            )
            await conn.execute(
                sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema))
            )
            await conn.execute(
                sql.SQL("SET LOCAL search_path TO {}").format(sql.Identifier(schema))
            )
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_version ("
                " version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            cur = await conn.execute("SELECT version FROM schema_version")
            done = {row["version"] for row in await cur.fetchall()}
            applied = []
            for migration in available():
                if migration.version in done:
                    continue
                await conn.execute(migration.text.encode())
                await conn.execute(
                    "INSERT INTO schema_version (version, name) VALUES (%(v)s, %(n)s)",
                    {"v": migration.version, "n": migration.name},
                )
                applied.append(migration.version)
                logger.info(
                    "applied migration %03d_%s",
                    migration.version,
                    migration.name,
                    extra={"event": "migration_applied"},
                )
            stored = await _shard_count(conn)
            if stored is None:
                stored = shards or DEFAULT_SHARDS
                await conn.execute(
                    "INSERT INTO meta (key, value) VALUES ('shard_count', %(v)s)",
                    {"v": str(stored)},
                )
            elif shards is not None and shards != stored:
                raise InvalidInput(
                    "shards",
                    f"the database was initialised with {stored} shards; "
                    "the shard count never changes",
                )
            version = max(done | set(applied), default=0)
    except psycopg.Error as exc:
        raise StoreError(f"migration failed: {describe(exc)}") from exc
    return InitResult(tuple(applied), version, stored)


async def _shard_count(conn: Conn) -> int | None:
    cur = await conn.execute("SELECT value FROM meta WHERE key = 'shard_count'")
    row = await cur.fetchone()
    return int(row["value"]) if row else None


async def stored_shard_count(conn: Conn) -> int:
    """The shard count fixed at init; StoreError if the schema was never initialised."""
    try:
        return await _current_shard_count(conn)
    except psycopg.Error as exc:
        raise store_error(exc) from exc


async def _current_shard_count(conn: Conn) -> int:
    count = await _shard_count(conn)
    if count is None:
        raise SchemaMissing
    return count
