"""`pulse init` against a real Postgres: fresh, repeated, concurrent, shard count fixed at the
first init, schemas isolated, and the checksum of every applied migration recorded and
checked. The schema the migrations make is compared with schema.sql in test_schema.py."""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import replace
from typing import Any

import psycopg
import pytest

from cluster.errors import ConfigError, InvalidInput, StoreError
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.connect import connect
from cluster.store.jobstore.store import JobStore
from cluster.store.schema.migrate import Migration, available, migrate
from tests.helpers.cli import spawn

ALL = tuple(m.name for m in available())


def fetch(settings: ClusterSettings, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()


def execute(settings: ClusterSettings, sql: str, params: Any = None) -> None:
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        conn.execute(sql, params)


def recorded_by_a_fresh_init() -> list[tuple[int, str, str]]:
    """(version, name, checksum) of each row of schema_version after a first init: a
    numbered migration is its number and the name after it, a later one its whole name under
    the next number."""
    rows, top = [], 0
    for m in available():
        if m.number is None:
            top += 1
            rows.append((top, m.name, m.checksum))
        else:
            top = m.number
            rows.append((m.number, m.short_name, m.checksum))
    return rows


def versions(settings: ClusterSettings) -> list[tuple[Any, ...]]:
    return fetch(
        settings,
        f"SELECT version, name, applied_at, checksum FROM {settings.schema}.schema_version"
        " ORDER BY 1",
    )


def stored_shards(settings: ClusterSettings) -> str:
    rows = fetch(settings, f"SELECT value FROM {settings.schema}.meta WHERE key = 'shard_count'")
    assert len(rows) == 1
    return str(rows[0][0])


def schema_exists(settings: ClusterSettings) -> bool:
    rows = fetch(settings, "SELECT 1 FROM pg_namespace WHERE nspname = %s", (settings.schema,))
    return bool(rows)


def test_there_is_a_first_migration() -> None:
    assert ALL[:1] == ("001_init",)
    assert len(set(ALL)) == len(ALL)


async def test_fresh_init_applies_every_migration(settings: ClusterSettings) -> None:
    assert not schema_exists(settings)
    async with JobStore.open(settings) as store:
        result = await store.init(shards=16)
    assert result.applied == ALL
    assert result.version == ALL[-1]
    assert result.shards == 16
    recorded = [(v, n) for v, n, _, _ in versions(settings)]
    assert recorded == [(v, n) for v, n, _ in recorded_by_a_fresh_init()]
    assert stored_shards(settings) == "16"


async def test_default_shard_count_is_256(settings: ClusterSettings) -> None:
    async with JobStore.open(settings) as store:
        result = await store.init()
        assert await store.shard_count() == 256
    assert result.shards == 256
    assert stored_shards(settings) == "256"


async def test_repeated_init_applies_nothing(settings: ClusterSettings) -> None:
    async with JobStore.open(settings) as store:
        first = await store.init(shards=16)
    before = versions(settings)
    async with JobStore.open(settings) as store:
        again = await store.init()
        same_count = await store.init(shards=16)
    assert again.applied == () and same_count.applied == ()
    assert again.version == same_count.version == first.version
    assert again.shards == same_count.shards == 16
    assert versions(settings) == before, "schema_version untouched, applied_at and checksum too"


async def test_concurrent_init_on_separate_connections(settings: ClusterSettings) -> None:
    conns = [await connect(settings, f"init-{i}") for i in range(8)]
    try:
        results = await asyncio.gather(*(migrate(c, settings.schema, 16) for c in conns))
    finally:
        for conn in conns:
            await conn.close()
    assert sorted(r.applied for r in results) == [()] * 7 + [ALL]
    assert {(r.version, r.shards) for r in results} == {(ALL[-1], 16)}
    assert [v for v, _, _, _ in versions(settings)] == [v for v, _, _ in recorded_by_a_fresh_init()]
    assert stored_shards(settings) == "16"


def test_concurrent_pulse_init_processes(settings: ClusterSettings) -> None:
    procs = [spawn(settings, "init", "--shards", "16") for _ in range(4)]
    outputs = [(done.stdout, done.stderr) for done in (p.result() for p in procs)]
    assert [p.returncode for p in procs] == [0] * 4, outputs
    lines = [out.strip() for out, _ in outputs]
    assert sum(f"(applied: {', '.join(ALL)})" in line for line in lines) == 1, lines
    assert sum("(applied: none)" in line for line in lines) == 3, lines
    assert all(line.endswith("; 16 shards") for line in lines), lines
    assert [v for v, _, _, _ in versions(settings)] == [v for v, _, _ in recorded_by_a_fresh_init()]
    assert stored_shards(settings) == "16"


def test_shard_count_never_changes_after_first_init(settings: ClusterSettings) -> None:
    first = spawn(settings, "init", "--shards", "16").result()
    assert first.stdout.strip().endswith("16 shards")
    assert first.returncode == 0
    second = spawn(settings, "init", "--shards", "32").result()
    out, err = second.stdout, second.stderr
    assert second.returncode == 2
    assert out == ""
    assert len(err.splitlines()) == 1, err
    assert "shards" in err and "16" in err and "Traceback" not in err
    assert stored_shards(settings) == "16"


async def test_shard_count_mismatch_from_the_api(settings: ClusterSettings) -> None:
    async with JobStore.open(settings) as store:
        await store.init(shards=16)
        with pytest.raises(InvalidInput) as info:
            await store.init(shards=32)
        assert info.value.field == "shards"
        assert (await store.init()).shards == 16
    assert stored_shards(settings) == "16"


@pytest.mark.parametrize("shards", [0, -1, 10**9])
async def test_invalid_shard_count_creates_nothing(settings: ClusterSettings, shards: int) -> None:
    async with JobStore.open(settings) as store:
        with pytest.raises(InvalidInput) as info:
            await store.init(shards=shards)
    assert info.value.field == "shards"
    assert not schema_exists(settings)


async def test_schemas_are_isolated(settings: ClusterSettings) -> None:
    other = ClusterSettings(
        database_url=settings.database_url,
        redis_url=settings.redis_url,
        schema=settings.schema + "_b",
        cluster=settings.cluster + "-b",
    )
    spec = JobSpec.build("same-name", "@hourly", "app.jobs:tick")
    async with JobStore.open(settings) as a, JobStore.open(other) as b:
        assert (await a.init(shards=16)).applied == ALL
        assert (await b.init(shards=32)).applied == ALL, "b's first init, not a repeat"
        await a.definitions.add(spec)
        assert [j.name for j in await a.jobs()] == ["same-name"]
        assert await b.jobs() == []
        await b.definitions.add(spec)  # the same (tenant, name) is free in the other schema
        await a.remove("same-name")
        assert await a.jobs() == []
        assert [j.name for j in await b.jobs()] == ["same-name"]
        assert await a.shard_count() == 16
        assert await b.shard_count() == 32
    assert settings.lock_namespace != other.lock_namespace


async def test_uninitialised_schema_says_run_init(settings: ClusterSettings) -> None:
    async with JobStore.open(settings) as store:
        for call in (store.jobs(), store.shard_count(), store.get("x")):
            with pytest.raises(StoreError, match="pulse init"):
                await call
    assert not schema_exists(settings)


# -- checksums of applied migrations --------------------------------------------------------


async def test_fresh_init_records_the_checksum_of_every_file(settings: ClusterSettings) -> None:
    async with JobStore.open(settings) as store:
        await store.init(shards=16)
    assert [(v, c) for v, _, _, c in versions(settings)] == [
        (v, c) for v, _, c in recorded_by_a_fresh_init()
    ]


async def test_a_schema_at_014_gets_the_checksums_of_its_files_with_015(
    settings: ClusterSettings,
) -> None:
    conn = await connect(settings, "init")
    try:
        before_015 = [m for m in available() if m.number is not None and m.number < 15]
        old = await migrate(conn, settings.schema, 16, before_015)
        columns = fetch(
            settings,
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = %s AND table_name = 'schema_version'",
            (settings.schema,),
        )
        assert {c for (c,) in columns} == {"version", "name", "applied_at"}
        new = await migrate(conn, settings.schema)
    finally:
        await conn.close()
    assert (old.version, new.applied) == ("014_tenant_limits", ALL[14:])
    assert [(v, c) for v, _, _, c in versions(settings)] == [
        (v, c) for v, _, c in recorded_by_a_fresh_init()
    ]


# Where main numbered four migrations before e367d4e: file now -> number then.
NUMBERED_THEN = {26: 27, 27: 30, 28: 29, 29: 26}


async def test_a_schema_numbered_as_main_was_before_e367d4e_is_renumbered(
    settings: ClusterSettings,
) -> None:
    """Its rows get today's numbers and the files' checksums, and nothing runs twice. The
    schemas main really made then are upgraded in test_upgrade_paths.py."""
    numbered = [m for m in available() if m.number is not None]
    table = f"{settings.schema}.schema_version"
    conn = await connect(settings, "init")
    try:
        await migrate(conn, settings.schema, 16, numbered)
        execute(settings, f"UPDATE {table} SET version = -version WHERE version BETWEEN 26 AND 29")
        for now, then in NUMBERED_THEN.items():
            execute(
                settings,
                f"UPDATE {table} SET version = %s, checksum = %s WHERE version = %s",
                (then, "0" * 64, -now),
            )
        result = await migrate(conn, settings.schema)
    finally:
        await conn.close()
    assert result.applied == ALL[len(numbered) :]
    assert [(v, n, c) for v, n, _, c in versions(settings)] == recorded_by_a_fresh_init()


async def test_an_edited_migration_is_refused_with_nothing_written(
    settings: ClusterSettings,
) -> None:
    async with JobStore.open(settings) as store:
        await store.init(shards=16)
    before = versions(settings)
    edited = [
        replace(m, text=m.text + "-- edited\n", checksum=hashlib.sha256(b"edited").hexdigest())
        if m.name == "014_tenant_limits"
        else m
        for m in available()
    ]
    later = Migration("9.9.9_pre_later", "CREATE TABLE later (x integer);", "0" * 64)
    conn = await connect(settings, "init")
    try:
        with pytest.raises(ConfigError, match=r"^migration 014_tenant_limits\.sql was edited"):
            await migrate(conn, settings.schema, migrations=[*edited, later])
    finally:
        await conn.close()
    assert versions(settings) == before
    later_tables = "SELECT 1 FROM pg_tables WHERE schemaname = %s AND tablename = 'later'"
    assert fetch(settings, later_tables, (settings.schema,)) == [], "no later migration applied"


def test_pulse_init_refuses_an_edited_migration(settings: ClusterSettings) -> None:
    first = spawn(settings, "init", "--shards", "16").result()
    assert first.returncode == 0, first.stderr
    # As if 014_tenant_limits.sql had changed since it was applied.
    execute(
        settings,
        f"UPDATE {settings.schema}.schema_version SET checksum = %s WHERE version = 14",
        ("0" * 64,),
    )
    before = versions(settings)
    again = spawn(settings, "init").result()
    out, err = again.stdout, again.stderr
    assert again.returncode == 2
    assert out == ""
    assert len(err.splitlines()) == 1, err
    assert "014_tenant_limits.sql was edited" in err and "new migration" in err, err
    assert versions(settings) == before


async def test_the_jobs_the_api_wrote_may_still_be_run_over_it_after_0_3_0(
    settings: ClusterSettings,
) -> None:
    """``0.3.0_pre_api_run``: a job whose newest revision the API wrote gets ``api_run``
    (it could be triggered over the API before), one of the CLI does not."""
    before = [m for m in available() if m.name != "0.3.0_pre_api_run"]
    assert len(before) == len(available()) - 1
    conn = await connect(settings, "init")
    try:
        await migrate(conn, settings.schema, 16, before)
        with psycopg.connect(settings.database_url, autocommit=True) as owner:
            owner.execute(f"SET search_path TO {settings.schema}")
            for name, how in (("from-api", "api"), ("from-cli", "cli")):
                owner.execute("SELECT set_config('pulse.who', 'x', false)")
                owner.execute("SELECT set_config('pulse.how', %s, false)", (how,))
                owner.execute(
                    "INSERT INTO jobs (id, name, schedule, handler, shard_id, next_run_at,"
                    " slot_at) VALUES (gen_random_uuid(), %s, '@hourly', 'shell:true', 0,"
                    " now(), now())",
                    (name,),
                )
        await migrate(conn, settings.schema)
    finally:
        await conn.close()
    found = fetch(settings, f"SELECT name, api_run FROM {settings.schema}.jobs ORDER BY name")
    assert found == [("from-api", True), ("from-cli", False)]
