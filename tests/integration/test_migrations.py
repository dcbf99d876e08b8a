"""`pulse init` against a real Postgres: fresh, repeated, concurrent, shard count fixed at the
first init, schemas isolated. The schema the migrations make is compared with schema.sql in
test_schema.py."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from cluster.errors import InvalidInput, StoreError
from cluster.jobspec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.connect import connect
from cluster.store.jobs import JobStore
from cluster.store.migrate import available, migrate

REPO = Path(__file__).resolve().parents[2]
ALL_VERSIONS = tuple(m.version for m in available())


def pulse_env(settings: ClusterSettings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULSE_")}
    env.update(
        PULSE_DATABASE_URL=settings.database_url,
        PULSE_REDIS_URL=settings.redis_url,
        PULSE_SCHEMA=settings.schema,
        PULSE_CLUSTER=settings.cluster,
    )
    return env


def pulse(settings: ClusterSettings, *args: str) -> subprocess.Popen[str]:
    """Start the real `pulse` CLI (``python -m node`` is its entry point)."""
    return subprocess.Popen(
        [sys.executable, "-m", "node", *args],
        cwd=REPO,
        env=pulse_env(settings),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def fetch(settings: ClusterSettings, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()


def versions(settings: ClusterSettings) -> list[tuple[Any, ...]]:
    return fetch(
        settings,
        f"SELECT version, name, applied_at FROM {settings.schema}.schema_version ORDER BY 1",
    )


def stored_shards(settings: ClusterSettings) -> str:
    rows = fetch(settings, f"SELECT value FROM {settings.schema}.meta WHERE key = 'shard_count'")
    assert len(rows) == 1
    return str(rows[0][0])


def schema_exists(settings: ClusterSettings) -> bool:
    rows = fetch(settings, "SELECT 1 FROM pg_namespace WHERE nspname = %s", (settings.schema,))
    return bool(rows)


def test_there_is_a_first_migration() -> None:
    assert ALL_VERSIONS[:1] == (1,)
    assert list(ALL_VERSIONS) == sorted(set(ALL_VERSIONS)), "numbered, in order, no duplicates"


async def test_fresh_init_applies_every_migration(settings: ClusterSettings) -> None:
    assert not schema_exists(settings)
    async with JobStore.open(settings) as store:
        result = await store.init(shards=16)
    assert result.applied == ALL_VERSIONS
    assert result.version == ALL_VERSIONS[-1]
    assert result.shards == 16
    assert [(v, n) for v, n, _ in versions(settings)] == [(m.version, m.name) for m in available()]
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
    assert versions(settings) == before, "schema_version untouched, applied_at included"


async def test_concurrent_init_on_separate_connections(settings: ClusterSettings) -> None:
    conns = [await connect(settings, f"init-{i}") for i in range(8)]
    try:
        results = await asyncio.gather(*(migrate(c, settings.schema, 16) for c in conns))
    finally:
        for conn in conns:
            await conn.close()
    assert sorted(r.applied for r in results) == [()] * 7 + [ALL_VERSIONS]
    assert {(r.version, r.shards) for r in results} == {(ALL_VERSIONS[-1], 16)}
    assert [v for v, _, _ in versions(settings)] == list(ALL_VERSIONS)
    assert stored_shards(settings) == "16"


def test_concurrent_pulse_init_processes(settings: ClusterSettings) -> None:
    procs = [pulse(settings, "init", "--shards", "16") for _ in range(4)]
    outputs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, outputs
    lines = [out.strip() for out, _ in outputs]
    applied = ", ".join(f"{v:03d}" for v in ALL_VERSIONS)
    assert sum(f"(applied: {applied})" in line for line in lines) == 1, lines
    assert sum("(applied: none)" in line for line in lines) == 3, lines
    assert all(line.endswith("; 16 shards") for line in lines), lines
    assert [v for v, _, _ in versions(settings)] == list(ALL_VERSIONS)
    assert stored_shards(settings) == "16"


def test_shard_count_never_changes_after_first_init(settings: ClusterSettings) -> None:
    first = pulse(settings, "init", "--shards", "16")
    assert first.communicate(timeout=60)[0].strip().endswith("16 shards")
    assert first.returncode == 0
    second = pulse(settings, "init", "--shards", "32")
    out, err = second.communicate(timeout=60)
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
        assert (await a.init(shards=16)).applied == ALL_VERSIONS
        assert (await b.init(shards=32)).applied == ALL_VERSIONS, "b's first init, not a repeat"
        await a.add(spec)
        assert [j.name for j in await a.jobs()] == ["same-name"]
        assert await b.jobs() == []
        await b.add(spec)  # the same (tenant, name) is free in the other schema
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
