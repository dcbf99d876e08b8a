"""Schema migrations: numbered ``.sql`` files in ``cluster/store/schema/migrations`` applied in
order.

They run in one transaction under a transaction-scoped advisory lock keyed by the schema,
so ``pulse init`` is safe to run twice or from several processes at once. Applied versions
are recorded in ``schema_version`` with the sha256 of the file applied: a landed migration
is never edited, and init and a starting node refuse a schema whose file has changed since
(docs/design/schema.md). The shard count is fixed by the first init and stored in
``meta``; it never changes afterwards.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import psycopg
from psycopg import sql

from cluster.errors import ConfigError, InvalidInput, StoreError
from cluster.settings import DEFAULT_SHARDS
from cluster.store.connect import Conn, SchemaMissing, describe
from cluster.store.queries import store_error
from ring import validate_shard_count

logger = logging.getLogger(__name__)

_FILE = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql$")

# A node of this release runs on schema versions REQUIRED_VERSION..KNOWN_VERSION and refuses
# any other at start (tests/integration/test_node_startup.py).
REQUIRED_VERSION = 30
KNOWN_VERSION = 30

# The migration that adds schema_version.checksum; rows applied before it get theirs after.
_CHECKSUMS_SINCE = 15


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    text: str
    checksum: str  # sha256 of the file's bytes, in hex

    @property
    def filename(self) -> str:
        return f"{self.version:03d}_{self.name}.sql"


@dataclass(frozen=True)
class InitResult:
    applied: tuple[int, ...]
    version: int
    shards: int


def available() -> list[Migration]:
    found = []
    for entry in resources.files("cluster.store.schema.migrations").iterdir():
        match = _FILE.match(entry.name)
        if match:
            data = entry.read_bytes()
            checksum = hashlib.sha256(data).hexdigest()
            found.append(Migration(int(match[1]), match[2], data.decode("utf-8"), checksum))
    return sorted(found, key=lambda m: m.version)


def _check_unedited(rows: Iterable[Mapping[str, Any]], files: Sequence[Migration]) -> None:
    """ConfigError if an applied migration's recorded checksum is not its file's."""
    by_version = {m.version: m for m in files}
    for row in rows:
        migration = by_version.get(row["version"])
        stored = row.get("checksum")  # no such column before migration 015
        if migration is not None and stored is not None and stored != migration.checksum:
            raise ConfigError(
                f"migration {migration.filename} was edited after it was applied to this "
                "schema (its sha256 differs from the one recorded); restore the file as "
                "released and put the change in a new migration"
            )


async def migrate(
    conn: Conn,
    schema: str,
    shards: int | None = None,
    migrations: Sequence[Migration] | None = None,
) -> InitResult:
    """Bring ``schema`` up to date; fix the shard count on first run. ``migrations`` stands
    in for the packaged files (tests: an older release's set, an edited file). ConfigError,
    with nothing written, if an applied migration's file was edited since."""
    files = available() if migrations is None else sorted(migrations, key=lambda m: m.version)
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
            cur = await conn.execute("SELECT * FROM schema_version")
            rows = await cur.fetchall()
            _check_unedited(rows, files)
            done = {row["version"] for row in rows}
            applied = []
            for migration in files:
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
            version = max(done | set(applied), default=0)
            if version >= _CHECKSUMS_SINCE:
                await _record_checksums(conn, files)
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
    except psycopg.Error as exc:
        raise StoreError(f"migration failed: {describe(exc)}") from exc
    return InitResult(tuple(applied), version, stored)


async def _record_checksums(conn: Conn, files: Sequence[Migration]) -> None:
    """The checksum of every applied migration that has none yet: those applied in this
    transaction, and on the first init with migration 015, every earlier one."""
    await conn.execute(
        "UPDATE schema_version s SET checksum = f.checksum"
        " FROM unnest(%(v)s::integer[], %(c)s::text[]) AS f (version, checksum)"
        " WHERE s.version = f.version AND s.checksum IS NULL",
        {"v": [m.version for m in files], "c": [m.checksum for m in files]},
    )


async def check_schema(conn: Conn) -> None:
    """ConfigError unless the schema is at a version this node runs on, made by migration
    files as this release ships them; a node checks it once, at start."""
    try:
        cur = await conn.execute("SELECT * FROM schema_version")
        rows = await cur.fetchall()
    except psycopg.Error as exc:
        raise store_error(exc) from exc
    version = max((row["version"] for row in rows), default=0)
    if version < REQUIRED_VERSION:
        raise ConfigError(
            f"the schema is at version {version} but this node needs {REQUIRED_VERSION}; "
            "run `pulse init` with this release"
        )
    if version > KNOWN_VERSION:
        raise ConfigError(
            f"the schema is at version {version}, newer than this node knows "
            f"({KNOWN_VERSION}); upgrade this node"
        )
    _check_unedited(rows, available())


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
