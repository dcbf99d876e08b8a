"""``cluster/store/schema/schema.sql`` is the schema the migrations make: the migrations go into one
empty database, schema.sql into another, and their catalogs must match, part by part
(docs/design/schema.md)."""

from __future__ import annotations

import asyncio
import difflib
import os
import secrets
from collections.abc import Iterator
from importlib import resources

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from cluster.store.schema.migrate import available, migrate
from tests.helpers.databases import ADMIN_URL, _with_database

SCHEMA = "pulse"  # the same name in both databases, so the catalogs compare as they are

Catalog = dict[str, list[str]]

RELATIONS = """
SELECT c.relname || ' ' || c.relkind::text
       || coalesce(' ' || array_to_string(c.reloptions, ','), '')
FROM pg_class c
WHERE c.relnamespace = %(s)s::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
"""

# Positions are counted, not taken from attnum, which keeps the gap of a dropped column.
COLUMNS = """
SELECT c.relname || ' ' || row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum) || ' '
       || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
       || CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END
       || CASE a.attidentity::text
          WHEN 'a' THEN ' IDENTITY ALWAYS' WHEN 'd' THEN ' IDENTITY' ELSE '' END
       || CASE WHEN a.attgenerated = 's' THEN ' GENERATED ' ELSE ' DEFAULT ' END
       || coalesce(pg_get_expr(d.adbin, d.adrelid), '-')
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE c.relnamespace = %(s)s::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
  AND a.attnum > 0 AND NOT a.attisdropped
"""

# A check a migration added NOT VALID (to spare a scan under lock) holds for every row all
# the same; schema.sql declares it plainly.
CONSTRAINTS = """
SELECT c.relname || ' ' || con.conname || ' '
       || regexp_replace(pg_get_constraintdef(con.oid), ' NOT VALID$', '')
FROM pg_constraint con
JOIN pg_class c ON c.oid = con.conrelid
WHERE con.connamespace = %(s)s::regnamespace
"""

INDEXES = """
SELECT pg_get_indexdef(i.indexrelid)
FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid
WHERE c.relnamespace = %(s)s::regnamespace
"""

# Definitions span lines: each is (a short name, its text); every line, stripped, is
# prefixed with the name, so a diff says whose line it is.
FUNCTIONS = """
SELECT p.proname || '/' || p.pronargs, pg_get_functiondef(p.oid)
FROM pg_proc p
WHERE p.pronamespace = %(s)s::regnamespace
"""

TRIGGERS = """
SELECT c.relname || '.' || t.tgname, pg_get_triggerdef(t.oid, true)
FROM pg_trigger t
JOIN pg_class c ON c.oid = t.tgrelid
WHERE c.relnamespace = %(s)s::regnamespace AND NOT t.tgisinternal
"""

VIEWS = """
SELECT c.relname, pg_get_viewdef(c.oid, true)
FROM pg_class c
WHERE c.relnamespace = %(s)s::regnamespace AND c.relkind IN ('v', 'm')
"""

LINES = {
    "relations": RELATIONS,
    "columns": COLUMNS,
    "constraints": CONSTRAINTS,
    "indexes": INDEXES,
}
DEFINITIONS = {"functions": FUNCTIONS, "triggers": TRIGGERS, "views": VIEWS}


def catalog(url: str) -> Catalog:
    """The schema's catalog as sorted lines, one list per kind of object."""
    found: Catalog = {}
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(SCHEMA)))
        for kind, query in LINES.items():
            found[kind] = sorted(row[0] for row in conn.execute(query, {"s": SCHEMA}))
        for kind, query in DEFINITIONS.items():
            found[kind] = [
                f"{name}: {line.strip()}"
                for name, text in sorted(conn.execute(query, {"s": SCHEMA}).fetchall())
                for line in text.splitlines()
                if line.strip()
            ]
    return found


async def apply_migrations(url: str) -> None:
    async with await psycopg.AsyncConnection.connect(
        url, autocommit=True, row_factory=dict_row
    ) as conn:
        result = await migrate(conn, SCHEMA, 16)
    assert result.version == available()[-1].name


def apply_schema_sql(url: str) -> None:
    text = resources.files("cluster.store.schema").joinpath("schema.sql").read_text("utf-8")
    with psycopg.connect(url) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(SCHEMA)))
        conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(sql.Identifier(SCHEMA)))
        conn.execute(text.encode())


@pytest.fixture(scope="module")
def catalogs() -> Iterator[tuple[Catalog, Catalog]]:
    """(migrations, schema.sql): each applied to a throwaway database of its own."""
    base = f"pulse_test_{os.getpid()}_{secrets.token_hex(3)}"
    names = [f"{base}_migrated", f"{base}_reference"]
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        for name in names:
            admin.execute(f'CREATE DATABASE "{name}"')
    try:
        migrated, reference = (_with_database(ADMIN_URL, name) for name in names)
        asyncio.run(apply_migrations(migrated))
        apply_schema_sql(reference)
        yield catalog(migrated), catalog(reference)
    finally:
        with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
            for name in names:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_both_databases_hold_the_schema(catalogs: tuple[Catalog, Catalog]) -> None:
    for found in catalogs:
        assert {"jobs r fillfactor=80", "runs r", "tenant_room v"} <= set(found["relations"])
        assert any(line.startswith("record_run/15: ") for line in found["functions"])


@pytest.mark.parametrize("kind", [*LINES, *DEFINITIONS])
def test_schema_sql_matches_the_migrations(catalogs: tuple[Catalog, Catalog], kind: str) -> None:
    migrated, reference = catalogs
    diff = "\n".join(
        difflib.unified_diff(
            migrated[kind], reference[kind], "migrations", "schema.sql", n=2, lineterm=""
        )
    )
    if diff:
        pytest.fail(f"schema.sql and the migrations differ in their {kind}:\n{diff}", False)
