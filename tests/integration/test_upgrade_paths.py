"""Every schema that a commit of main made upgrades to the schema a fresh init makes.

For each different set of migration files that main had up to the previous release
(``tests/helpers/releases.py``), a schema is made as that commit's `pulse init` made it, then
upgraded by this tree's. A set whose files are, comments aside, this tree's first files
made a schema that a fresh init passes through, and is left out. For the others: nothing
is refused, the ledger lists this tree's migrations with their files' checksums, and the
catalog is a fresh schema's. Only the positions of columns may differ, where a set added
them in another order: moving a column means rewriting its table, and every statement
names the columns it reads (docs/design/schema.md).
"""

from __future__ import annotations

import asyncio
import difflib
import re

import pytest

from cluster.settings import ClusterSettings
from cluster.store.connect import Conn, connect
from cluster.store.schema.migrate import Migration, available, migrate
from tests.helpers.catalogs import Catalog, catalog
from tests.helpers.databases import fresh_settings
from tests.helpers.releases import HISTORY, migration_sets, needs_history

pytestmark = [needs_history]


def statements(migration: Migration) -> str:
    return "\n".join(
        line for line in migration.text.splitlines() if not line.lstrip().startswith("--")
    )


def passed_through(files: list[Migration]) -> bool:
    """The files are this tree's first ones, comments aside."""
    ours = available()[: len(files)]
    return [(m.name, statements(m)) for m in files] == [(m.name, statements(m)) for m in ours]


SETS = {c: files for c, files in migration_sets() if not passed_through(files)} if HISTORY else {}
Made = tuple[Catalog, list[tuple[int, str]]]


def without_positions(found: Catalog, schema: str) -> Catalog:
    """The catalog with the schema's name and the columns' positions left out."""
    return {
        kind: sorted(
            re.sub(r"^(\S+) \d+ ", r"\1 ", line) if kind == "columns" else line
            for line in (line.replace(schema, "<schema>") for line in lines)
        )
        for kind, lines in found.items()
    }


async def upgraded(settings: ClusterSettings, *steps: list[Migration] | None) -> Made:
    """The schema made by migrating it with each step's files (None: this tree's), its
    catalog and its ledger's (version, checksum)."""
    conn: Conn = await connect(settings, "upgrade-paths")
    try:
        for files in steps:
            await migrate(conn, settings.schema, 16, files)
        cur = await conn.execute(
            f"SELECT version, checksum FROM {settings.schema}.schema_version ORDER BY 1"
        )
        rows = [(row["version"], row["checksum"]) for row in await cur.fetchall()]
    finally:
        await conn.close()
    return without_positions(catalog(settings.database_url, settings.schema), settings.schema), rows


@pytest.fixture(scope="module")
def fresh(database_url: str) -> Made:
    return asyncio.run(upgraded(fresh_settings(database_url), None))


@pytest.mark.parametrize("commit", list(SETS))
async def test_a_schema_main_made_upgrades_to_a_fresh_one(
    fresh: Made, settings: ClusterSettings, commit: str
) -> None:
    (want, ledger), (got, got_ledger) = fresh, await upgraded(settings, SETS[commit], None)
    # The same migrations, each as released; a release's migrations may have landed on
    # main in another order than their names', and versions only order the rows.
    assert sorted(checksum for _, checksum in got_ledger) == sorted(c for _, c in ledger)
    diff = [
        line
        for kind in want
        for line in difflib.unified_diff(want[kind], got[kind], "fresh", commit, lineterm="")
    ]
    assert diff == [], "\n".join(diff)
