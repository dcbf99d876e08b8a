"""What nodes of the previous release call keeps working after this tree's migrations.

During a rolling upgrade they run on the schema this tree's `pulse init` made, until each is
replaced. Every named statement of the previous release (``tests/helpers/releases.py``) is
prepared on a schema its own migrations made, then on one that this tree's migrations
upgraded: each must prepare on both, with the same parameter and result types (a
``SELECT *`` may gain columns after the ones it had: old nodes read rows by name). So a
migration can neither drop nor change a table, column or function those nodes use; that
waits for a post-migration of a later release (docs/design/schema.md). The end-to-end
proof, nodes firing across the upgrade, is tests/e2e/test_rolling_upgrade.py.
"""

from __future__ import annotations

import re
from typing import Any

import psycopg
from psycopg import pq, sql

from cluster.settings import ClusterSettings
from cluster.store.connect import connect
from cluster.store.schema.migrate import migrate
from tests.helpers.releases import PREVIOUS, migration_sets, needs_history, statements

pytestmark = [needs_history]

PLACEHOLDER = re.compile(r"%\((\w+)\)s|%%")


def numbered(statement: str) -> str:
    """The statement with psycopg's named placeholders as Postgres's ``$n``."""
    names: dict[str, int] = {}

    def number(match: re.Match[str]) -> str:
        if match[1] is None:
            return "%"
        return f"${names.setdefault(match[1], len(names) + 1)}"

    return PLACEHOLDER.sub(number, statement)


def prepared(url: str, schema: str, found: dict[str, str]) -> dict[str, Any]:
    """Statement name -> its (parameter types, result column names and types), or the
    SQLSTATE preparing it fails with."""
    shapes: dict[str, Any] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        pgconn = conn.pgconn
        for name, statement in sorted(found.items()):
            done = pgconn.prepare(name.encode(), numbered(statement).encode())
            if done.status != pq.ExecStatus.COMMAND_OK:
                shapes[name] = done.error_field(pq.DiagnosticField.SQLSTATE)
                continue
            shape = pgconn.describe_prepared(name.encode())
            shapes[name] = (
                [shape.param_type(i) for i in range(shape.nparams)],
                [(shape.fname(i), shape.ftype(i)) for i in range(shape.nfields)],
            )
    return shapes


def _kept(before: Any, after: Any) -> bool:
    """The statement prepares as it did: the same parameters, and the same result columns in
    the same order, with at most new ones among them (an added column that a ``*`` now also
    returns, before what the statement selects after the ``*``)."""
    if isinstance(before, tuple) and isinstance(after, tuple):
        (params, columns), (new_params, new_columns) = before, after
        remaining = iter(new_columns)
        return bool(params == new_params and all(c in remaining for c in columns))
    return bool(before == after)


async def test_the_previous_releases_statements_prepare_as_before(
    settings: ClusterSettings,
) -> None:
    _, files = migration_sets()[-1]  # the previous release's own
    old, upgraded = f"{settings.schema}_old", f"{settings.schema}_upgraded"
    conn = await connect(settings, "previous-release")
    try:
        await migrate(conn, old, 16, files)
        await migrate(conn, upgraded, 16, files)
        await migrate(conn, upgraded, 16)
    finally:
        await conn.close()
    found = statements()
    before = prepared(settings.database_url, old, found)
    assert sum(isinstance(shape, tuple) for shape in before.values()) > len(found) * 0.9, before
    after = prepared(settings.database_url, upgraded, found)
    changed = [
        f"{name}: "
        + (
            f"fails ({after[name].decode()})"
            if isinstance(after[name], bytes)
            else f"{before[name]} became {after[name]}"
        )
        for name in sorted(found)
        if not _kept(before[name], after[name])
    ]
    assert changed == [], f"statements of {PREVIOUS} that prepare otherwise now: {changed}"
