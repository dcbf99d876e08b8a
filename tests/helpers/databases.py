"""The Postgres database and Redis keys the tests use: one throwaway database per test
session, and per test one schema and one Redis key prefix (a fresh ``ClusterSettings``), so
runs, and parallel CI jobs, never collide. The fixtures of ``tests/conftest.py`` call these.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import redis
from psycopg import sql

from cluster.settings import ClusterSettings

ADMIN_URL = os.environ.get("PULSE_TEST_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("PULSE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def _with_database(url: str, name: str) -> str:
    base, _, _ = url.rpartition("/")
    return f"{base}/{name}"


@contextlib.contextmanager
def throwaway_database() -> Iterator[str]:
    """The URL of a new database, dropped (whoever is still connected) at the end."""
    name = f"pulse_test_{os.getpid()}_{secrets.token_hex(3)}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
        # No commit waits for its WAL flush: the tests never crash this server (they end
        # backends, stall proxies and kill nodes), so no acknowledged commit can be lost,
        # and a run is not bound by the disk's fsync latency, which varies between VMs.
        conn.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = off')
    try:
        yield _with_database(ADMIN_URL, name)
    finally:
        with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def fresh_settings(database_url: str, schema: str | None = None) -> ClusterSettings:
    """A cluster of its own in ``database_url``: a new Redis key prefix, and a new schema
    unless ``schema`` names an emptied one (``SchemaPool``)."""
    tag = secrets.token_hex(4)
    return ClusterSettings(
        database_url=database_url,
        redis_url=REDIS_URL,
        schema=schema or f"t_{tag}",
        cluster=f"test-{tag}",
    )


def forget_redis_keys(settings: ClusterSettings) -> None:
    """Delete every Redis key under the cluster's prefix."""
    client = redis.Redis.from_url(REDIS_URL)
    try:
        keys = list(client.scan_iter(match=settings.key_prefix + "*"))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


# A catalog fingerprint of one schema: its relations, columns, defaults, constraints,
# functions, triggers, policies and grants (oids included, so a dropped and re-made object
# differs). Equal before and after a test: the test changed rows only.
_FINGERPRINT = """
SELECT md5(string_agg(item, ',' ORDER BY item)) FROM (
    SELECT concat_ws('/', 'r', c.oid, c.relname, c.relkind, c.relowner, c.relacl,
                     c.reloptions, c.relrowsecurity, c.relforcerowsecurity) AS item
    FROM pg_class c WHERE c.relnamespace = %(ns)s::regnamespace
    UNION ALL
    SELECT concat_ws('/', 'a', a.attrelid, a.attname, a.atttypid, a.attnotnull, a.attacl)
    FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
    WHERE c.relnamespace = %(ns)s::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
    UNION ALL
    SELECT concat_ws('/', 'd', d.oid) FROM pg_attrdef d JOIN pg_class c ON c.oid = d.adrelid
    WHERE c.relnamespace = %(ns)s::regnamespace
    UNION ALL
    SELECT concat_ws('/', 'k', k.oid, k.convalidated) FROM pg_constraint k
    WHERE k.connamespace = %(ns)s::regnamespace
    UNION ALL
    SELECT concat_ws('/', 'p', p.oid, md5(p.prosrc), p.proowner, p.proacl, p.proconfig,
                     p.prosecdef)
    FROM pg_proc p WHERE p.pronamespace = %(ns)s::regnamespace
    UNION ALL
    SELECT concat_ws('/', 't', t.oid, t.tgenabled) FROM pg_trigger t
    JOIN pg_class c ON c.oid = t.tgrelid WHERE c.relnamespace = %(ns)s::regnamespace
    UNION ALL
    SELECT concat_ws('/', 'o', o.oid) FROM pg_policy o
    JOIN pg_class c ON c.oid = o.polrelid WHERE c.relnamespace = %(ns)s::regnamespace
    UNION ALL
    SELECT concat_ws('/', 'n', n.nspowner, n.nspacl) FROM pg_namespace n
    WHERE n.oid = %(ns)s::regnamespace
) AS catalog
"""

# Rows that `pulse init` writes and a reused schema keeps (or gets back).
_KEPT = ("schema_version", "meta")
_SEEDED = ("config",)


@dataclass
class _Clean:
    fingerprint: str
    seeded: dict[str, list[tuple[object, ...]]]
    kept: str


def _kept_rows(conn: psycopg.Connection[Any], schema: str) -> str:
    parts = []
    for table in _KEPT:
        query = sql.SQL("SELECT md5(string_agg(t::text, ',' ORDER BY t::text)) FROM {} t")
        row = conn.execute(query.format(sql.Identifier(schema, table))).fetchone()
        parts.append(str(row[0] if row else None))
    return "/".join(parts)


class SchemaPool:
    """Initialised schemas handed from one test to the next (per test session).

    Migrating a new schema is most of a short test's time, so a test that asks for the
    ``store`` fixture gets a schema an earlier test used, emptied, when that test left its
    catalog as ``pulse init`` made it (same fingerprint, same bookkeeping rows); otherwise
    the schema is left behind and the next test migrates a new one. Rows are deleted with
    triggers off (``session_replication_role``), sequences restarted and the seeded config
    rows put back: for a test the schema is as new."""

    def __init__(self) -> None:
        self._clean: dict[str, _Clean] = {}
        self._free: list[str] = []

    def take(self) -> str | None:
        return self._free.pop() if self._free else None

    def record_clean(self, database_url: str, schema: str) -> None:
        """Remember ``schema`` as ``pulse init`` left it (call right after init)."""
        if schema in self._clean:
            return
        with psycopg.connect(database_url, autocommit=True) as conn:
            fingerprint = _fingerprint(conn, schema)
            seeded = {
                table: list(
                    conn.execute(
                        sql.SQL("SELECT * FROM {}").format(sql.Identifier(schema, table))
                    ).fetchall()
                )
                for table in _SEEDED
            }
            self._clean[schema] = _Clean(fingerprint, seeded, _kept_rows(conn, schema))

    def give_back(self, database_url: str, schema: str) -> None:
        """Empty ``schema`` for the next test if its catalog is unchanged; else drop it
        from the pool (it stays in the throwaway database)."""
        clean = self._clean.pop(schema, None)
        if clean is None:
            return
        try:
            with psycopg.connect(database_url, autocommit=True) as conn:
                if (
                    _fingerprint(conn, schema) != clean.fingerprint
                    or _kept_rows(conn, schema) != clean.kept
                ):
                    return
                _empty(conn, schema, clean.seeded)
        except psycopg.Error:
            return  # a lock some test left held: a new schema for the next test
        self._clean[schema] = clean
        self._free.append(schema)


def _fingerprint(conn: psycopg.Connection[Any], schema: str) -> str:
    row = conn.execute(_FINGERPRINT, {"ns": schema}).fetchone()
    return str(row[0] if row else None)


def _empty(
    conn: psycopg.Connection[Any], schema: str, seeded: dict[str, list[tuple[object, ...]]]
) -> None:
    tables = [
        row[0]
        for row in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)
        ).fetchall()
        if row[0] not in _KEPT
    ]
    sequences = conn.execute(
        "SELECT sequencename, start_value FROM pg_sequences WHERE schemaname = %s", (schema,)
    ).fetchall()
    with conn.transaction():
        conn.execute("SET LOCAL lock_timeout = '2s'")
        conn.execute("SET LOCAL session_replication_role = replica")
        for table in tables:
            conn.execute(sql.SQL("DELETE FROM {}").format(sql.Identifier(schema, table)))
        for table, rows in seeded.items():
            for row in rows:
                conn.execute(
                    sql.SQL("INSERT INTO {} VALUES ({})").format(
                        sql.Identifier(schema, table),
                        sql.SQL(", ").join(sql.Placeholder() * len(row)),
                    ),
                    row,
                )
        for name, start in sequences:
            conn.execute("SELECT setval(%s::regclass, %s, false)", (f'"{schema}"."{name}"', start))
    # The planner must see new tables too: emptied pages cut off, no statistics, sizes as
    # never vacuumed (plan tests, and claims whose order follows the plan, assume them).
    conn.execute(
        sql.SQL("VACUUM {}").format(
            sql.SQL(", ").join(sql.Identifier(schema, table) for table in tables)
        )
    )
    with conn.transaction():
        conn.execute(
            "DELETE FROM pg_statistic WHERE starelid IN"
            " (SELECT oid FROM pg_class WHERE relnamespace = %(ns)s::regnamespace)",
            {"ns": schema},
        )
        conn.execute(
            "UPDATE pg_class SET relpages = 0, reltuples = -1, relallvisible = 0"
            " WHERE relnamespace = %(ns)s::regnamespace AND relkind IN ('r', 'i', 't')",
            {"ns": schema},
        )


# The fixtures through which a test starts from ``pulse init``'s schema (16 shards), and
# this test session's pool.
INITIALISING = frozenset({"store", "initialised"})
SCHEMAS = SchemaPool()
