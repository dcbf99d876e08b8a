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
from tests.helpers.catalogs import DEFINITIONS, LINES, Catalog, catalog
from tests.helpers.databases import ADMIN_URL, _with_database

SCHEMA = "pulse"  # the same name in both databases, so the catalogs compare as they are


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
        yield catalog(migrated, SCHEMA), catalog(reference, SCHEMA)
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
