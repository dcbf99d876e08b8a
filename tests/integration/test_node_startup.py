"""A node refuses, at startup, settings that would break the cluster's guarantees."""

from __future__ import annotations

from typing import Any

import psycopg

from cluster.settings import ClusterSettings
from cluster.store.connect import connect
from cluster.store.jobstore.store import JobStore
from cluster.store.schema.migrate import available, migrate
from tests.helpers.cli import spawn


async def test_shard_count_differing_from_the_database_is_refused(
    store: JobStore, settings: ClusterSettings
) -> None:
    result = spawn(settings, "node", "--node-id", "n1", "--shards", "32").result()
    assert result.returncode == 2
    assert "--shards 32 but the database has 16" in result.stderr


async def test_session_timeout_too_close_to_poll_interval_is_refused(
    store: JobStore, settings: ClusterSettings
) -> None:
    result = spawn(settings, "node", "--session-timeout", "2s", "--poll-interval", "1s").result()
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "session timeout 2.0s is not well above" in lines[0]


async def test_bad_node_flags_exit_2_with_one_line(
    store: JobStore, settings: ClusterSettings
) -> None:
    for args, field in (
        (["--concurrency", "0"], "concurrency"),
        (["--lease", "-3s"], "lease"),
        (["--node-id", "bad id"], "node_id"),
        (["--freeze-limit", "1s"], "freeze-limit"),  # under 2 heartbeat intervals
        (["--freeze-limit", "-3s"], "freeze-limit"),
    ):
        result = spawn(settings, "node", *args).result()
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2, (args, result.stderr)
        assert len(lines) == 1 and field in lines[0], (args, lines)


async def test_uninitialised_schema_is_reported_not_crashed(settings: ClusterSettings) -> None:
    # No `pulse init` ran for this schema: the node keeps retrying; jobs commands say why.
    result = spawn(settings, "jobs", "list").result()
    assert result.returncode == 1
    assert "pulse init" in result.stderr and "Traceback" not in result.stderr


# -- the schema's version and migrations --------------------------------------------------


def execute(settings: ClusterSettings, statement: str, params: Any = None) -> None:
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        conn.execute(statement, params)


async def test_a_schema_older_than_the_node_needs_is_refused(settings: ClusterSettings) -> None:
    *older, newest = available()
    conn = await connect(settings, "init")
    try:
        await migrate(conn, settings.schema, 16, older)
    finally:
        await conn.close()
    result = spawn(settings, "node", "--node-id", "n1").result()
    assert result.returncode == 2
    needed = f"lacks migration {newest.name} that this node needs; run `pulse init`"
    assert needed in result.stderr, result.stderr


async def test_a_schema_newer_than_the_node_knows_is_refused(
    store: JobStore, settings: ClusterSettings
) -> None:
    execute(
        settings,
        f"INSERT INTO {settings.schema}.schema_version (version, name)"
        " VALUES (1000, '9.9.9_pre_later')",
    )
    result = spawn(settings, "node", "--node-id", "n1").result()
    assert result.returncode == 2
    newest = available()[-1].name
    assert (
        f"has migration 9.9.9_pre_later, newer than this node knows ({newest}); upgrade this node"
        in result.stderr
    ), result.stderr


async def test_a_schema_numbered_as_main_was_before_e367d4e_needs_pulse_init(
    store: JobStore, settings: ClusterSettings
) -> None:
    table = f"{settings.schema}.schema_version"
    execute(settings, f"UPDATE {table} SET version = 126 WHERE version = 26")
    execute(settings, f"UPDATE {table} SET version = 26 WHERE version = 29")  # job_revisions
    result = spawn(settings, "node", "--node-id", "n1").result()
    assert result.returncode == 2
    assert "run `pulse init`" in result.stderr, result.stderr


async def test_a_schema_made_by_an_edited_migration_is_refused(
    store: JobStore, settings: ClusterSettings
) -> None:
    execute(
        settings,
        f"UPDATE {settings.schema}.schema_version SET checksum = %s WHERE version = 14",
        ("0" * 64,),
    )
    result = spawn(settings, "node", "--node-id", "n1").result()
    assert result.returncode == 2
    assert "migration 014_tenant_limits.sql was edited" in result.stderr, result.stderr
