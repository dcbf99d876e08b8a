"""`pulse init` against a real Postgres: fresh, repeated, concurrent, shard count fixed at the
first init, schemas isolated, and the exact schema the migrations produce."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from cluster.errors import InvalidInput, StoreError
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.connect import connect
from cluster.store.jobs import JobStore
from cluster.store.migrate import available, migrate
from tests.helpers.cli import spawn

ALL_VERSIONS = tuple(m.version for m in available())


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
    procs = [spawn(settings, "init", "--shards", "16") for _ in range(4)]
    outputs = [(done.stdout, done.stderr) for done in (p.result() for p in procs)]
    assert [p.returncode for p in procs] == [0] * 4, outputs
    lines = [out.strip() for out, _ in outputs]
    applied = ", ".join(f"{v:03d}" for v in ALL_VERSIONS)
    assert sum(f"(applied: {applied})" in line for line in lines) == 1, lines
    assert sum("(applied: none)" in line for line in lines) == 3, lines
    assert all(line.endswith("; 16 shards") for line in lines), lines
    assert [v for v, _, _ in versions(settings)] == list(ALL_VERSIONS)
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


EXPECTED_TABLES = {
    "meta", "schema_version", "jobs", "runs", "config", "alert_rules", "alert_events",
    "alert_deliveries", "flights", "api_tokens", "api_audit", "backfills",
    "zone_spaces",  # migration 012
    "tenant_limits", "tenant_moves",  # migration 014
}  # fmt: skip

# pg_indexes.indexdef with the schema name replaced by "S".
EXPECTED_INDEXES = {
    "jobs_pkey": "CREATE UNIQUE INDEX jobs_pkey ON S.jobs USING btree (id)",
    "jobs_tenant_id_name_key": (
        "CREATE UNIQUE INDEX jobs_tenant_id_name_key ON S.jobs USING btree (tenant_id, name)"
    ),
    "jobs_due": "CREATE INDEX jobs_due ON S.jobs USING btree (shard_id, next_run_at)",
    "meta_pkey": "CREATE UNIQUE INDEX meta_pkey ON S.meta USING btree (key)",
    "runs_pkey": "CREATE UNIQUE INDEX runs_pkey ON S.runs USING btree (id)",
    "runs_job_id_scheduled_for_key": (
        "CREATE UNIQUE INDEX runs_job_id_scheduled_for_key ON S.runs"
        " USING btree (job_id, scheduled_for)"
    ),
    "runs_by_status": (
        "CREATE INDEX runs_by_status ON S.runs USING btree (status, scheduled_for DESC)"
        " WHERE (status <> 'succeeded'::text)"
    ),
    "runs_recent": "CREATE INDEX runs_recent ON S.runs USING btree (scheduled_for DESC)",
    "schema_version_pkey": (
        "CREATE UNIQUE INDEX schema_version_pkey ON S.schema_version USING btree (version)"
    ),
    "config_pkey": "CREATE UNIQUE INDEX config_pkey ON S.config USING btree (key)",
    "alert_rules_pkey": "CREATE UNIQUE INDEX alert_rules_pkey ON S.alert_rules USING btree (name)",
    "alert_events_pkey": "CREATE UNIQUE INDEX alert_events_pkey ON S.alert_events USING btree (id)",
    "alert_events_created": (
        "CREATE INDEX alert_events_created ON S.alert_events USING btree (created_at)"
    ),
    "alert_deliveries_pkey": (
        "CREATE UNIQUE INDEX alert_deliveries_pkey ON S.alert_deliveries USING btree (id)"
    ),
    "alert_deliveries_event_id_rule_name_key": (
        "CREATE UNIQUE INDEX alert_deliveries_event_id_rule_name_key ON S.alert_deliveries"
        " USING btree (event_id, rule_name)"
    ),
    "alert_deliveries_pending": (
        "CREATE INDEX alert_deliveries_pending ON S.alert_deliveries"
        " USING btree (next_attempt_at) WHERE (status = 'pending'::text)"
    ),
    "alert_deliveries_by_rule_job": (
        "CREATE INDEX alert_deliveries_by_rule_job ON S.alert_deliveries"
        " USING btree (rule_name, job_id, id) WHERE (status = 'pending'::text)"
    ),
    "flights_pkey": "CREATE UNIQUE INDEX flights_pkey ON S.flights USING btree (job_id, slot)",
    "flights_by_shard": (
        "CREATE INDEX flights_by_shard ON S.flights USING btree (shard_id, status, due_at)"
    ),
    # migration 010: the HTTP API's tokens and audit trail
    "api_tokens_pkey": "CREATE UNIQUE INDEX api_tokens_pkey ON S.api_tokens USING btree (name)",
    "api_tokens_hash_key": (
        "CREATE UNIQUE INDEX api_tokens_hash_key ON S.api_tokens USING btree (hash)"
    ),
    "api_audit_pkey": "CREATE UNIQUE INDEX api_audit_pkey ON S.api_audit USING btree (id)",
    "api_audit_at": "CREATE INDEX api_audit_at ON S.api_audit USING btree (at DESC, id DESC)",
    # migration 012: a shard space per zone set
    "zone_spaces_pkey": "CREATE UNIQUE INDEX zone_spaces_pkey ON S.zone_spaces USING btree (space)",
    "jobs_children": (
        "CREATE INDEX jobs_children ON S.jobs USING btree (parent_id) WHERE (parent_id IS NOT NULL)"
    ),
    "jobs_each_zone": "CREATE INDEX jobs_each_zone ON S.jobs USING btree (id) WHERE each_zone",
    # migration 013: fair fan-out's loose scan of the tenants of a shard
    "jobs_tenant_due": "CREATE INDEX jobs_tenant_due ON S.jobs USING btree "
    "(shard_id, tenant_id, next_run_at)",
    # migration 014: per-tenant limits
    "tenant_limits_pkey": (
        "CREATE UNIQUE INDEX tenant_limits_pkey ON S.tenant_limits USING btree (tenant_id)"
    ),
    "tenant_moves_by_tenant": (
        "CREATE INDEX tenant_moves_by_tenant ON S.tenant_moves USING btree (tenant_id)"
    ),
    "zone_spaces_zones_key": (
        "CREATE UNIQUE INDEX zone_spaces_zones_key ON S.zone_spaces USING btree (zones)"
    ),
    # migration 011: backfill requests, and the flights they queue
    "backfills_pkey": "CREATE UNIQUE INDEX backfills_pkey ON S.backfills USING btree (id)",
    "backfills_active": (
        "CREATE INDEX backfills_active ON S.backfills USING btree (shard_id)"
        " WHERE (status = 'active'::text)"
    ),
    "flights_by_backfill": (
        "CREATE INDEX flights_by_backfill ON S.flights USING btree (backfill_id)"
        " WHERE (backfill_id IS NOT NULL)"
    ),
}

EXPECTED_CONSTRAINTS = {
    ("jobs", "PRIMARY KEY (id)"),
    ("jobs", "UNIQUE (tenant_id, name)"),
    ("meta", "PRIMARY KEY (key)"),
    ("runs", "PRIMARY KEY (id)"),
    ("runs", "UNIQUE (job_id, scheduled_for)"),
    ("schema_version", "PRIMARY KEY (version)"),
    ("config", "PRIMARY KEY (key)"),
    ("alert_rules", "PRIMARY KEY (name)"),
    ("alert_events", "PRIMARY KEY (id)"),
    ("alert_deliveries", "PRIMARY KEY (id)"),
    ("alert_deliveries", "UNIQUE (event_id, rule_name)"),
    ("alert_deliveries", "FOREIGN KEY (event_id) REFERENCES S.alert_events(id) ON DELETE CASCADE"),
    (
        "alert_deliveries",
        "FOREIGN KEY (rule_name) REFERENCES S.alert_rules(name) ON DELETE CASCADE",
    ),
    ("flights", "PRIMARY KEY (job_id, slot)"),
    ("flights", "FOREIGN KEY (job_id) REFERENCES S.jobs(id) ON DELETE CASCADE"),
    ("tenant_limits", "PRIMARY KEY (tenant_id)"),
    ("api_tokens", "PRIMARY KEY (name)"),
    ("api_tokens", "UNIQUE (hash)"),
    ("api_audit", "PRIMARY KEY (id)"),
    ("zone_spaces", "PRIMARY KEY (space)"),
    ("zone_spaces", "UNIQUE (zones)"),
    ("backfills", "PRIMARY KEY (id)"),
    ("backfills", "FOREIGN KEY (job_id) REFERENCES S.jobs(id) ON DELETE CASCADE"),
    ("flights", "FOREIGN KEY (backfill_id) REFERENCES S.backfills(id) ON DELETE SET NULL"),
}

# Functions, with their identity arguments.
EXPECTED_FUNCTIONS = {
    ("forget_deleted_jobs_runs", ""),
    (
        "record_run",
        "run_job_id uuid, run_tenant_id text, run_job_name text,"
        " run_scheduled_for timestamp with time zone, run_attempt integer, run_node_id text,"
        " run_zone text, run_status text, run_lease_token bigint,"
        " run_started_at timestamp with time zone, run_finished_at timestamp with time zone,"
        " run_duration_s double precision, run_last_error text",
    ),
    (  # migration 007: with the output; the one above stays for the previous release
        "record_run",
        "run_job_id uuid, run_tenant_id text, run_job_name text,"
        " run_scheduled_for timestamp with time zone, run_attempt integer, run_node_id text,"
        " run_zone text, run_status text, run_lease_token bigint,"
        " run_started_at timestamp with time zone, run_finished_at timestamp with time zone,"
        " run_duration_s double precision, run_last_error text, run_output jsonb",
    ),
    (  # migration 011: with the run's origin
        "record_run",
        "run_job_id uuid, run_tenant_id text, run_job_name text,"
        " run_scheduled_for timestamp with time zone, run_attempt integer, run_node_id text,"
        " run_zone text, run_status text, run_lease_token bigint,"
        " run_started_at timestamp with time zone, run_finished_at timestamp with time zone,"
        " run_duration_s double precision, run_last_error text, run_output jsonb,"
        " run_origin text",
    ),
    (
        "raise_alert",
        "a_event text, a_job_id uuid, a_tenant_id text, a_job_name text,"
        " a_slot timestamp with time zone, a_attempt integer, a_node_id text, a_zone text,"
        " a_error text, a_detail text",
    ),
    # migration 014: places of tenants with a limit
    ("tenant_lock_key", "tenant text"),
    ("tenant_take", "tenant text"),
    ("tenant_free", "tenant text"),
    ("tenant_mark_job", ""),
    ("tenant_mark_flight", ""),
    ("tenant_flight_born", ""),
    ("tenant_status", ""),
    ("tenant_deleted", ""),
}

JOB_COLUMNS = {
    "id", "tenant_id", "name", "schedule", "tz", "dst_repeated", "dst_skipped", "handler",
    "payload", "status", "paused", "shard_id", "next_run_at", "slot_at", "attempt",
    "last_run_at", "locked_by", "locked_at", "locked_zone", "lease_expires_at", "lease_token",
    "catch_up", "grace_s", "max_backfill", "timeout_s", "max_retries", "retry_backoff_s",
    "created_at", "updated_at", "keep_for_s", "keep_runs", "output_limit", "late_after_s",
    "late_slot", "pause_after_failures", "failed_slots", "pause_note", "overlap",
    "max_concurrent", "cancel_grace_s", "cancel_by",
    "zones", "each_zone", "parent_id",  # migration 012
    "jitter_s", "remove_when_done", "slot_origin",  # migration 011
    "limited",  # migration 014
}  # fmt: skip
RUN_COLUMNS = {
    "id", "job_id", "tenant_id", "job_name", "scheduled_for", "attempt", "node_id", "zone",
    "status", "lease_token", "started_at", "finished_at", "duration_s", "last_error", "output",
    "origin",  # migration 011
}  # fmt: skip


async def test_migrations_produce_the_expected_schema(settings: ClusterSettings) -> None:
    async with JobStore.open(settings) as store:
        await store.init(shards=16)
    schema = settings.schema
    tables = fetch(settings, "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,))
    assert {t for (t,) in tables} == EXPECTED_TABLES

    indexes = fetch(
        settings, "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s", (schema,)
    )
    got = {name: d.replace(f" {schema}.", " S.") for name, d in indexes}
    assert got == EXPECTED_INDEXES

    constraints = fetch(
        settings,
        "SELECT conrelid::regclass::text, pg_get_constraintdef(oid) FROM pg_constraint"
        " WHERE connamespace = %s::regnamespace AND contype IN ('p', 'u', 'f')",
        (schema,),
    )
    normalised = {
        (table.removeprefix(f"{schema}."), d.replace(f" {schema}.", " S."))
        for table, d in constraints
    }
    assert normalised == EXPECTED_CONSTRAINTS

    # In place of a foreign key from runs to jobs (checked on every run row written).
    triggers = fetch(
        settings,
        "SELECT event_object_table, trigger_name, action_timing, event_manipulation,"
        " action_orientation FROM information_schema.triggers WHERE trigger_schema = %s",
        (schema,),
    )
    assert set(triggers) == {
        ("jobs", "jobs_forget_runs", "AFTER", "DELETE", "STATEMENT"),
        # migration 014: a tenant's places, kept by the rows of tenants with a limit
        ("jobs", "tenant_mark", "BEFORE", "INSERT", "ROW"),
        ("jobs", "tenant_place", "BEFORE", "UPDATE", "ROW"),
        ("jobs", "tenant_place_deleted", "AFTER", "DELETE", "ROW"),
        ("flights", "tenant_mark", "BEFORE", "INSERT", "ROW"),
        ("flights", "tenant_place_born", "AFTER", "INSERT", "ROW"),
        ("flights", "tenant_place", "BEFORE", "UPDATE", "ROW"),
        ("flights", "tenant_place_deleted", "AFTER", "DELETE", "ROW"),
    }

    functions = fetch(
        settings,
        "SELECT proname, pg_get_function_identity_arguments(oid) FROM pg_proc"
        " WHERE pronamespace = %s::regnamespace",
        (schema,),
    )
    assert set(functions) == EXPECTED_FUNCTIONS

    columns = fetch(
        settings,
        "SELECT table_name, column_name FROM information_schema.columns"
        " WHERE table_schema = %s AND table_name IN ('jobs', 'runs')",
        (schema,),
    )
    assert {c for t, c in columns if t == "jobs"} == JOB_COLUMNS
    assert {c for t, c in columns if t == "runs"} == RUN_COLUMNS

    checks = fetch(
        settings,
        "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
        " WHERE conrelid = %s::regclass AND contype = 'c'",
        (f"{schema}.runs",),
    )
    (status_check,) = [d for (d,) in checks if "status" in d]
    for status in ("running", "succeeded", "failed", "timed_out", "cancelled", "skipped", "lost"):
        assert f"'{status}'" in status_check
