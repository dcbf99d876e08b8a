"""Schema migrations: the ``.sql`` files of ``cluster/store/schema/migrations``, applied in
one order by ``pulse init``.

Files have one of two names. ``NNN_name.sql`` (001 to 029) were numbered one after another
up to release 0.2.0 and keep their numbers. Since then a migration is named for the release
that ships it, ``X.Y.Z_pre_name.sql`` or ``X.Y.Z_post_name.sql``, so branches written side
by side never pick the same name. The order: the numbered files by number, then by release,
pre before post, then by name (docs/design/schema.md).

They run in one transaction under a transaction-scoped advisory lock keyed by the schema,
so ``pulse init`` is safe to run twice or from several processes at once. Each applied file
is a ``schema_version`` row with the sha256 of the file: a released migration is never
edited, and init and a starting node refuse a schema whose file has changed since. A node
runs on the schema of its own release only: every migration it ships applied, none it does
not know (``check_schema``). The shard count is fixed by the first init and stored in
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

_NUMBERED = re.compile(r"^(\d{3})_([a-z0-9_]+)$")
_BY_RELEASE = re.compile(r"^(\d+)\.(\d+)\.(\d+)_(pre|post)_([a-z0-9_]+)$")
PHASES = ("pre", "post")

# The migration that adds schema_version.checksum; rows applied before it get theirs after.
_CHECKSUMS_SINCE = "015_migration_checksums"

Order = tuple[int, int, int, int, int, str]


@dataclass(frozen=True)
class Migration:
    name: str  # the file's name without ".sql"
    text: str
    checksum: str  # sha256 of the file's bytes, in hex

    @property
    def filename(self) -> str:
        return f"{self.name}.sql"

    @property
    def number(self) -> int | None:
        """The number of a migration named before release 0.2.0, else None."""
        match = _NUMBERED.match(self.name)
        return int(match[1]) if match else None

    @property
    def short_name(self) -> str:
        """The name after the number, as schema_version records a numbered migration."""
        return self.name.split("_", 1)[1] if self.number is not None else self.name

    @property
    def order(self) -> Order:
        if match := _BY_RELEASE.match(self.name):
            major, minor, patch, phase, rest = match.groups()
            return (1, int(major), int(minor), int(patch), PHASES.index(phase), rest)
        return (0, self.number or 0, 0, 0, 0, "")


@dataclass(frozen=True)
class InitResult:
    applied: tuple[str, ...]  # the names of the migrations this init applied, in order
    version: str  # the newest migration the schema has
    shards: int


def of_file(name: str, data: bytes) -> Migration:
    """The migration in file ``name`` (``029_job_revisions.sql``) holding ``data``;
    ValueError if the file is named neither way."""
    stem = name.removesuffix(".sql")
    if not (_NUMBERED.match(stem) or _BY_RELEASE.match(stem)):
        raise ValueError(f"{name} is named neither NNN_name.sql nor X.Y.Z_pre_name.sql")
    return Migration(stem, data.decode("utf-8"), hashlib.sha256(data).hexdigest())


def available() -> list[Migration]:
    """This release's migrations, in the order they apply."""
    folder = resources.files("cluster.store.schema.migrations")
    found = [of_file(f.name, f.read_bytes()) for f in folder.iterdir() if f.name.endswith(".sql")]
    return sorted(found, key=lambda m: m.order)


def _numbered(files: Iterable[Migration]) -> dict[int, Migration]:
    return {m.number: m for m in files if m.number is not None}


def _recorded(row: Mapping[str, Any], numbered: Mapping[int, Migration]) -> str:
    """The migration a schema_version row stands for. A numbered one is recorded by its
    number (and the name after it, which a file renamed before 015 no longer has), a later
    one by its name."""
    version, name = row["version"], row["name"]
    if _BY_RELEASE.match(name):
        return str(name)
    file = numbered.get(version)
    return file.name if file else f"{version:03d}_{name}"


def _renumbered(
    rows: Iterable[Mapping[str, Any]], numbered: Mapping[int, Migration]
) -> dict[int, int]:
    """Recorded number -> file number of the rows main numbered otherwise before e367d4e: it
    gave four migrations other numbers then, so a schema made in between holds a number
    whose file has another name, and the name of another numbered file."""
    by_name = {m.short_name: n for n, m in numbered.items()}
    moved = {}
    for row in rows:
        version, name = row["version"], row["name"]
        file = numbered.get(version)
        if (file is None or file.short_name != name) and name in by_name:
            moved[version] = by_name[name]
    return moved


def _check_unedited(rows: Iterable[Mapping[str, Any]], files: Sequence[Migration]) -> None:
    """ConfigError if an applied migration's recorded checksum is not its file's."""
    by_name = {m.name: m for m in files}
    numbered = _numbered(files)
    for row in rows:
        migration = by_name.get(_recorded(row, numbered))
        stored = row.get("checksum")  # no such column before migration 015
        if migration is not None and stored is not None and stored != migration.checksum:
            raise ConfigError(
                f"migration {migration.filename} was edited after it was applied to this "
                "schema (its sha256 differs from the one recorded); restore the file as "
                "released and put the change in a new migration"
            )


async def _ledger(conn: Conn) -> list[dict[str, Any]]:
    cur = await conn.execute("SELECT * FROM schema_version ORDER BY version")
    return list(await cur.fetchall())


async def migrate(
    conn: Conn,
    schema: str,
    shards: int | None = None,
    migrations: Sequence[Migration] | None = None,
) -> InitResult:
    """Bring ``schema`` up to date; fix the shard count on first run. ``migrations`` stands
    in for the packaged files (tests: an older release's set, an edited file). ConfigError,
    with nothing written, if an applied migration's file was edited since."""
    files = available() if migrations is None else sorted(migrations, key=lambda m: m.order)
    numbered = _numbered(files)
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
            rows = await _ledger(conn)
            if moved := _renumbered(rows, numbered):
                await _renumber(conn, moved)
                rows = await _ledger(conn)
            _check_unedited(rows, files)
            done = {_recorded(row, numbered) for row in rows}
            top = max((row["version"] for row in rows), default=0)
            applied = []
            for migration in files:
                if migration.name in done:
                    continue
                await conn.execute(migration.text.encode())
                # A numbered migration keeps its number as version; a later one takes the
                # next, which only orders the rows: it is known by its name.
                top = max(top, migration.number) if migration.number else top + 1
                await conn.execute(
                    "INSERT INTO schema_version (version, name) VALUES (%(v)s, %(n)s)",
                    {"v": migration.number or top, "n": migration.short_name},
                )
                applied.append(migration.name)
                logger.info(
                    "applied migration %s",
                    migration.name,
                    extra={"event": "migration_applied"},
                )
            if _CHECKSUMS_SINCE in done or _CHECKSUMS_SINCE in applied:
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
    has = [m for m in files if m.name in done or m.name in applied]
    return InitResult(tuple(applied), has[-1].name if has else "", stored)


async def _renumber(conn: Conn, moved: Mapping[int, int]) -> None:
    """Give renumbered rows their files' numbers, through negative ones so no two rows
    collide. The checksum is taken again from the file: the three moved last differ from
    what was applied only in their first comment line, and 0.2.0_pre_early_schemas brings
    the revision trigger of the fourth (029) up to date."""
    await conn.execute(
        "UPDATE schema_version s SET version = -f.new, checksum = NULL"
        " FROM unnest(%(old)s::integer[], %(new)s::integer[]) AS f (old, new)"
        " WHERE s.version = f.old",
        {"old": list(moved), "new": list(moved.values())},
    )
    await conn.execute("UPDATE schema_version SET version = -version WHERE version < 0")


async def _record_checksums(conn: Conn, files: Sequence[Migration]) -> None:
    """The checksum of every applied migration that has none yet: those applied in this
    transaction, those renumbered, and on the first init with migration 015, every
    earlier one."""
    numbered = _numbered(files)
    await conn.execute(
        "UPDATE schema_version s SET checksum = f.checksum"
        " FROM unnest(%(v)s::integer[], %(c)s::text[]) AS f (version, checksum)"
        " WHERE s.version = f.version AND s.checksum IS NULL",
        {"v": list(numbered), "c": [m.checksum for m in numbered.values()]},
    )
    await conn.execute(
        "UPDATE schema_version s SET checksum = f.checksum"
        " FROM unnest(%(n)s::text[], %(c)s::text[]) AS f (name, checksum)"
        " WHERE s.name = f.name AND s.checksum IS NULL",
        {
            "n": [m.name for m in files if m.number is None],
            "c": [m.checksum for m in files if m.number is None],
        },
    )


async def check_schema(conn: Conn) -> None:
    """ConfigError unless the schema has every migration of this release, none it does not
    know, each made by its file as released; a node checks it once, at start."""
    try:
        rows = await _ledger(conn)
    except psycopg.Error as exc:
        raise store_error(exc) from exc
    files = available()
    numbered = _numbered(files)
    applied = {_recorded(row, numbered) for row in rows}
    missing = [m.name for m in files if m.name not in applied]
    if missing or _renumbered(rows, numbered):
        first = missing[0] if missing else files[-1].name
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise ConfigError(
            f"the schema lacks migration {first}{more} that this node needs; "
            "run `pulse init` with this release"
        )
    known = {m.name for m in files}
    unknown = [name for name in (_recorded(row, numbered) for row in rows) if name not in known]
    if unknown:
        raise ConfigError(
            f"the schema has migration {unknown[-1]}, newer than this node knows "
            f"({files[-1].name}); upgrade this node"
        )
    _check_unedited(rows, files)


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
