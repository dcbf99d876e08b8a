"""The Python API (``JobStore``) against a real Postgres, with an explicit ``now`` wherever the
API takes one."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from cluster.errors import InvalidInput, NotFound, PulseError
from cluster.jobs.models import Job
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.connect import connection
from cluster.store.jobstore.store import JobStore
from cluster.timing.instants import EPOCH
from cluster.timing.schedule import parse_schedule
from ring import shard_for
from tests.helpers.waiting import until

T0 = datetime(2031, 3, 4, 12, 0, tzinfo=UTC)  # on every minute/hour boundary
HANDLER = "app.jobs:tick"

NASTY_NAMES = [
    "it's",
    'say "hi"',
    "'; DROP TABLE jobs; --",
    "Robert'); DROP TABLE runs;--",
    "back\\slash %s %(name)s {}",
    "日本語のジョブ",
    "emoji 🚀 job",
    "Ünïcödé ß",
    "$$ dollar $$ $tag$",
    "  leading and trailing  ",
]
NASTY_PAYLOAD: dict[str, Any] = {
    "quote": 'it\'s "quoted"',
    "sql": "'; DROP TABLE jobs; --",
    "unicode": "日本語 🚀 Ünïcödé",
    "backslash": "C:\\temp\\new \\u0000 is text here",
    "placeholders": "%s %(now)s {0} $1",
    "nested": {"list": [1, 2.5, None, True, "x"], "empty": {}, "deep": [[["z"]]]},
    "'; DELETE FROM runs; --": "key with SQL",
    "big": 2**53,
}


async def sql(settings: ClusterSettings, statement: str, params: Any = None) -> list[Any]:
    async with connection(settings, "pulse-test") as conn:
        cur = await conn.execute(statement, params)
        return await cur.fetchall() if cur.description else []


async def job_count(settings: ClusterSettings) -> int:
    (row,) = await sql(settings, "SELECT count(*) AS n FROM jobs")
    return int(row["n"])


async def snapshot(settings: ClusterSettings) -> list[dict[str, Any]]:
    return await sql(settings, "SELECT * FROM jobs ORDER BY tenant_id, name")


def spec(name: str = "tick", schedule: str = "*/5 * * * *", **kwargs: Any) -> JobSpec:
    return JobSpec.build(name, schedule, kwargs.pop("handler", HANDLER), **kwargs)


# -- add and get ---------------------------------------------------------------------------


async def test_add_and_get_with_defaults(store: JobStore) -> None:
    job = await store.definitions.add(spec(), now=T0)
    assert job.next_run_at == T0 + timedelta(minutes=5), "first slot strictly after now"
    assert job.slot_at == job.next_run_at
    assert job.next_run_at.utcoffset() == timedelta(0)
    assert (job.status, job.paused, job.attempt, job.lease_token) == ("idle", False, 1, 0)
    assert (job.tenant, job.tz, job.handler, job.payload) == ("default", "UTC", HANDLER, {})
    assert (job.catch_up, job.grace_s, job.max_backfill) == ("once", 60.0, 100)
    assert (job.timeout_s, job.retries, job.retry_backoff_s) == (300.0, 0, 10.0)
    assert (job.dst_repeated, job.dst_skipped) == ("once", "shift")
    assert job.last_run_at is None and job.locked_by is None and job.lease_expires_at is None
    assert job.shard == shard_for(job.id, 16)
    assert 0 <= job.shard < 16
    assert await store.get("tick") == job


async def test_add_with_every_option(store: JobStore) -> None:
    job = await store.definitions.add(
        spec(
            "nightly",
            "30 2 * * *",
            tenant="acme",
            tz="Europe/Berlin",
            payload='{"region": "eu", "n": 3}',
            catch_up="backfill",
            grace="2m",
            max_backfill="5",
            timeout="1h30m",
            retries=3,
            retry_backoff="500ms",
            dst_repeated="twice",
            dst_skipped="skip",
        ),
        now=T0,
    )
    # 02:30 in Berlin (CET, +01:00 in early March) is 01:30 UTC, the next day.
    assert job.next_run_at == datetime(2031, 3, 5, 1, 30, tzinfo=UTC)
    assert job.next_run_at.astimezone(ZoneInfo("Europe/Berlin")).hour == 2
    assert (job.tenant, job.name, job.tz) == ("acme", "nightly", "Europe/Berlin")
    assert job.payload == {"region": "eu", "n": 3}
    assert (job.catch_up, job.grace_s, job.max_backfill) == ("backfill", 120.0, 5)
    assert (job.timeout_s, job.retries, job.retry_backoff_s) == (5400.0, 3, 0.5)
    assert (job.dst_repeated, job.dst_skipped) == ("twice", "skip")
    assert await store.get("nightly", "acme") == job
    with pytest.raises(NotFound):
        await store.get("nightly")  # the default tenant has no such job


async def test_add_paused(store: JobStore) -> None:
    job = await store.definitions.add(spec(paused=True), now=T0)
    assert (job.status, job.paused) == ("paused", True)


async def test_every_schedule_is_epoch_aligned(store: JobStore) -> None:
    job = await store.definitions.add(spec("every", "@every 7m"), now=T0)
    assert (job.next_run_at - EPOCH) % timedelta(minutes=7) == timedelta(0)
    assert T0 < job.next_run_at <= T0 + timedelta(minutes=7)


async def test_db_now(store: JobStore) -> None:
    assert await store.db_now(T0) == T0
    real = await store.db_now()
    assert real.tzinfo is not None
    assert abs(real - datetime.now(UTC)) < timedelta(minutes=5)


async def test_duplicate_name_in_a_tenant_is_rejected(
    store: JobStore, settings: ClusterSettings
) -> None:
    first = await store.definitions.add(spec(), now=T0)
    before = await snapshot(settings)
    with pytest.raises(InvalidInput) as info:
        await store.definitions.add(spec(schedule="@daily", handler="other.mod:fn"), now=T0)
    assert info.value.field == "name"
    assert "tick" in str(info.value)
    assert await snapshot(settings) == before
    assert await store.get("tick") == first
    other = await store.definitions.add(spec(tenant="acme"), now=T0)  # same name, other tenant
    assert other.id != first.id
    assert await job_count(settings) == 2


async def test_not_found_is_a_lookup_error(store: JobStore) -> None:
    await store.definitions.add(spec(tenant="acme"), now=T0)
    calls = {
        "get": lambda: store.get("tick"),
        "pause": lambda: store.pause("tick"),
        "resume": lambda: store.resume("tick", now=T0),
        "trigger": lambda: store.trigger("tick", now=T0),
        "remove": lambda: store.remove("tick"),
        "missing": lambda: store.get("nope", "acme"),
    }
    for label, call in calls.items():
        with pytest.raises(NotFound) as info:
            await call()
        assert isinstance(info.value, LookupError), label
        assert isinstance(info.value, PulseError), label
        assert "tick" in str(info.value) or "nope" in str(info.value), label
    assert (await store.get("tick", "acme")).status == "idle", "the acme job was not touched"


async def test_jobs_lists_in_order_and_filters_by_tenant(store: JobStore) -> None:
    for tenant, name in [("b", "z"), ("a", "y"), ("b", "a"), ("default", "m")]:
        await store.definitions.add(spec(name, tenant=tenant), now=T0)
    assert [(j.tenant, j.name) for j in await store.jobs()] == [
        ("a", "y"),
        ("b", "a"),
        ("b", "z"),
        ("default", "m"),
    ]
    assert [j.name for j in await store.jobs("b")] == ["a", "z"]
    assert await store.jobs("nobody") == []


async def test_invalid_spec_built_directly_writes_nothing(
    store: JobStore, settings: ClusterSettings
) -> None:
    bad = [
        (JobSpec("x", "0 0 30 2 *", HANDLER), "schedule"),
        (JobSpec("x", "@hourly", "not a ref"), "handler"),
        (JobSpec("x", "@hourly", HANDLER, tz="Mars/Olympus"), "tz"),
        (JobSpec("x", "@hourly", HANDLER, catch_up="sometimes"), "catch_up"),
        (JobSpec("x", "@hourly", HANDLER, timeout_s=-5.0), "timeout"),
        (JobSpec("", "@hourly", HANDLER), "name"),
        (JobSpec("x", "@hourly", HANDLER, payload={"a": "\x00"}), "payload"),
    ]
    for job_spec, field in bad:
        with pytest.raises(InvalidInput) as info:
            await store.definitions.add(job_spec, now=T0)
        assert info.value.field == field, job_spec
    assert await job_count(settings) == 0


async def test_unencodable_text_is_invalid_input(store: JobStore) -> None:
    await store.definitions.add(spec(), now=T0)
    with pytest.raises(InvalidInput) as info:
        await store.get("bad\udcff")  # a byte that was not UTF-8 in argv
    assert info.value.field == "name"
    with pytest.raises(InvalidInput) as info:
        await store.jobs("bad\udcff")
    assert info.value.field == "tenant"
    with pytest.raises(InvalidInput) as info:
        await store.definitions.add(spec("bad\ud800"), now=T0)
    assert info.value.field == "name"
    assert [j.name for j in await store.jobs()] == ["tick"]


# -- pause, resume, trigger, remove --------------------------------------------------------


async def test_pause_and_resume_at_the_next_future_slot(store: JobStore) -> None:
    job = await store.definitions.add(spec(), now=T0)
    paused = await store.pause("tick")
    assert (paused.status, paused.paused) == ("paused", True)
    assert paused.next_run_at is None, "a paused job is never due"
    assert (await store.pause("tick")).status == "paused", "pausing twice is harmless"

    later = T0 + timedelta(hours=3, minutes=2, seconds=30)  # 36 slots were missed
    resumed = await store.resume("tick", now=later)
    assert (resumed.status, resumed.paused) == ("idle", False)
    assert resumed.next_run_at == T0 + timedelta(hours=3, minutes=5)
    assert resumed.slot_at == resumed.next_run_at
    assert resumed.attempt == 1
    assert resumed.schedule == job.schedule


async def test_resume_exactly_on_a_slot_moves_past_it(store: JobStore) -> None:
    await store.definitions.add(spec(), now=T0)
    await store.pause("tick")
    on_slot = T0 + timedelta(hours=1)
    assert (await store.resume("tick", now=on_slot)).next_run_at == on_slot + timedelta(minutes=5)


async def test_resume_of_an_idle_job_changes_nothing(store: JobStore) -> None:
    job = await store.definitions.add(spec(), now=T0)
    again = await store.resume("tick", now=T0 + timedelta(days=1))
    assert (again.status, again.next_run_at, again.slot_at) == (
        "idle",
        job.next_run_at,
        job.slot_at,
    )


async def test_resume_uses_the_job_time_zone(store: JobStore) -> None:
    await store.definitions.add(spec("ny", "0 9 * * *", tz="America/New_York", paused=True), now=T0)
    # 2031-03-09 is the US spring-forward day: 09:00 is already EDT, 13:00 UTC.
    resumed = await store.resume("ny", now=datetime(2031, 3, 9, 12, tzinfo=UTC))
    assert resumed.next_run_at == datetime(2031, 3, 9, 13, tzinfo=UTC)


async def test_trigger_makes_due_now_and_keeps_the_schedule(store: JobStore) -> None:
    job = await store.definitions.add(spec("hourly", "@hourly"), now=T0)
    assert job.next_run_at == T0 + timedelta(hours=1)
    now = T0 + timedelta(minutes=20)
    triggered = await store.trigger("hourly", now=now)
    assert (triggered.status, triggered.paused, triggered.attempt) == ("idle", False, 1)
    assert triggered.next_run_at == now
    assert triggered.slot_at == now
    assert (triggered.schedule, triggered.tz, triggered.id) == (job.schedule, job.tz, job.id)
    # After the triggered run the regular slot still comes next.
    regular = parse_schedule(triggered.schedule, triggered.tz).next_after(triggered.slot_at)
    assert regular == job.next_run_at


async def test_trigger_of_an_already_due_job_keeps_its_slot(store: JobStore) -> None:
    job = await store.definitions.add(spec(), now=T0)
    late = job.next_run_at + timedelta(minutes=1)
    triggered = await store.trigger("tick", now=late)
    assert (triggered.next_run_at, triggered.slot_at) == (job.next_run_at, job.slot_at)


async def test_trigger_of_a_paused_job_runs_once_and_stays_paused(store: JobStore) -> None:
    await store.definitions.add(spec(paused=True), now=T0)
    now = T0 + timedelta(minutes=2)
    triggered = await store.trigger("tick", now=now)
    assert (triggered.status, triggered.paused) == ("idle", True)
    assert triggered.next_run_at == triggered.slot_at == now


async def test_trigger_of_a_running_job_is_refused(
    store: JobStore, settings: ClusterSettings
) -> None:
    await store.definitions.add(spec(), now=T0)
    await sql(settings, "UPDATE jobs SET status = 'running', locked_by = 'n1'")
    before = await snapshot(settings)
    with pytest.raises(InvalidInput) as info:
        await store.trigger("tick", now=T0)
    assert info.value.field == "name"
    assert "running" in str(info.value)
    assert await snapshot(settings) == before


async def test_remove_deletes_the_job_and_its_runs(
    store: JobStore, settings: ClusterSettings
) -> None:
    job = await store.definitions.add(spec(), now=T0)
    keep = await store.definitions.add(spec("keep"), now=T0)
    for j in (job, keep):
        await insert_run(settings, j, T0, "succeeded")
    await store.remove("tick")
    with pytest.raises(NotFound):
        await store.get("tick")
    with pytest.raises(NotFound):
        await store.remove("tick")
    assert [r.job_name for r in await store.runs()] == ["keep"]
    assert [j.name for j in await store.jobs()] == ["keep"]


async def test_a_run_row_committed_while_its_job_is_deleted_goes_with_the_job(
    store: JobStore, settings: ClusterSettings
) -> None:
    job = await store.definitions.add(spec(), now=T0)
    async with connection(settings, "pulse-test") as writer, writer.transaction():
        # What a completion does: update the job row, write a run row from it.
        await writer.execute(
            "WITH done AS (UPDATE jobs SET updated_at = updated_at WHERE id = %(id)s"
            " RETURNING id, tenant_id, name)"
            " INSERT INTO runs (job_id, tenant_id, job_name, scheduled_for, status)"
            " SELECT id, tenant_id, name, %(slot)s, 'succeeded' FROM done",
            {"id": job.id, "slot": T0},
        )
        removing = asyncio.create_task(store.remove("tick"))
        waiting = (
            "SELECT 1 FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock' AND query LIKE 'DELETE FROM jobs%'"
        )
        await until(lambda: sql(settings, waiting), "the delete to wait", 20, interval_s=0.01)
    # Committed while the delete waited for the job row.
    await removing
    assert await sql(settings, "SELECT count(*) AS n FROM runs") == [{"n": 0}]


# -- apply ---------------------------------------------------------------------------------


async def test_apply_creates_then_is_idempotent(store: JobStore, settings: ClusterSettings) -> None:
    specs = [spec("a"), spec("b", "@hourly", tenant="acme", payload={"k": "v"})]
    first = await store.definitions.apply(specs, now=T0)
    assert (first.created, first.updated, first.unchanged, first.removed) == (
        ["a", "acme/b"],
        [],
        [],
        [],
    )
    assert first.changed
    before = await snapshot(settings)
    second = await store.definitions.apply(specs, now=T0 + timedelta(hours=5))
    assert (second.created, second.updated, second.removed) == ([], [], [])
    assert second.unchanged == ["a", "acme/b"]
    assert not second.changed
    assert await snapshot(settings) == before, "nothing touched, not even updated_at"


async def test_apply_updates_in_place(store: JobStore, settings: ClusterSettings) -> None:
    await store.definitions.apply([spec("a"), spec("b")], now=T0)
    a0, b0 = await store.get("a"), await store.get("b")
    later = T0 + timedelta(minutes=7)
    result = await store.definitions.apply(
        [spec("a", payload={"v": 2}, retries=2), spec("b", "@hourly")], now=later
    )
    assert sorted(result.updated) == ["a", "b"]
    a1, b1 = await store.get("a"), await store.get("b")
    assert (a1.id, a1.shard) == (a0.id, a0.shard), "same row, same shard"
    assert (a1.payload, a1.retries) == ({"v": 2}, 2)
    assert a1.next_run_at == a0.next_run_at, "timing unchanged: slot kept"
    assert b1.id == b0.id
    assert b1.schedule == "@hourly"
    assert b1.next_run_at == T0 + timedelta(hours=1), "new schedule: next slot after apply's now"


async def test_apply_prune_removes_absent_jobs_and_their_runs(
    store: JobStore, settings: ClusterSettings
) -> None:
    await store.definitions.apply([spec("a"), spec("b"), spec("c", tenant="acme")], now=T0)
    kept = await store.get("a")
    for j in (kept, await store.get("b")):
        await insert_run(settings, j, T0, "succeeded")
    result = await store.definitions.apply([spec("a")], prune=True, now=T0)
    assert sorted(result.removed) == ["acme/c", "b"]
    assert [r.job_name for r in await store.runs()] == ["a"]
    assert result.unchanged == ["a"]
    assert [(j.tenant, j.name, j.id) for j in await store.jobs()] == [("default", "a", kept.id)]
    without_prune = await store.definitions.apply([spec("z")], now=T0)
    assert without_prune.removed == []
    assert [j.name for j in await store.jobs()] == ["a", "z"]


async def test_apply_with_a_bad_entry_applies_none(
    store: JobStore, settings: ClusterSettings
) -> None:
    await store.definitions.apply([spec("a")], now=T0)
    before = await snapshot(settings)
    bad_batches = [
        [spec("a", payload={"changed": True}), JobSpec("b", "not cron", HANDLER), spec("c")],
        [spec("a", retries=5), spec("c"), JobSpec("d", "@hourly", "shell:"), JobSpec("", "", "")],
        [spec("c"), spec("c")],  # duplicate (tenant, name) in one batch
    ]
    for batch in bad_batches:
        for prune in (False, True):
            with pytest.raises(InvalidInput):
                await store.definitions.apply(batch, prune=prune, now=T0)
            assert await snapshot(settings) == before
    with pytest.raises(InvalidInput) as info:
        await store.definitions.apply(bad_batches[1], now=T0)
    message = str(info.value)
    assert "entry 3" in message and "entry 4" in message, "every bad entry is reported"
    assert "entry 1" not in message and "entry 2" not in message


# -- awkward text round-trips --------------------------------------------------------------


async def test_names_and_payloads_round_trip_unchanged(
    store: JobStore, settings: ClusterSettings
) -> None:
    for name in NASTY_NAMES:
        added = await store.definitions.add(spec(name, tenant=name, payload=NASTY_PAYLOAD), now=T0)
        assert (added.name, added.tenant, added.payload) == (name, name, NASTY_PAYLOAD)
        got = await store.get(name, name)
        assert (got.name, got.tenant, got.payload) == (name, name, NASTY_PAYLOAD)
        assert [j.name for j in await store.jobs(name)] == [name]
    shell = "shell:echo 'it''s' \"$HOME\"; DROP TABLE jobs; -- 🚀"
    await store.definitions.add(spec("shell", handler=shell), now=T0)
    assert (await store.get("shell")).handler == shell
    assert await job_count(settings) == len(NASTY_NAMES) + 1
    # Controls go through the same parameters.
    name = NASTY_NAMES[2]
    assert (await store.pause(name, name)).status == "paused"
    assert (await store.resume(name, name, now=T0)).status == "idle"
    await store.remove(name, name)
    assert await job_count(settings) == len(NASTY_NAMES)


async def test_apply_round_trips_awkward_text(store: JobStore) -> None:
    specs = [spec(n, tenant="t", payload={"name": n, **NASTY_PAYLOAD}) for n in NASTY_NAMES]
    assert len((await store.definitions.apply(specs, now=T0)).created) == len(NASTY_NAMES)
    assert (await store.definitions.apply(specs, now=T0)).unchanged == [
        f"t/{n}" for n in NASTY_NAMES
    ]
    by_name = {j.name: j for j in await store.jobs("t")}
    assert set(by_name) == set(NASTY_NAMES)
    for name, job in by_name.items():
        assert job.payload == {"name": name, **NASTY_PAYLOAD}
    result = await store.definitions.apply(specs[:1], prune=True, now=T0)
    assert sorted(result.removed) == sorted(f"t/{n}" for n in NASTY_NAMES[1:])


# -- runs ----------------------------------------------------------------------------------


async def insert_run(
    settings: ClusterSettings, job: Job, slot: datetime, status: str, attempt: int = 1
) -> None:
    await sql(
        settings,
        "INSERT INTO runs (job_id, tenant_id, job_name, scheduled_for, attempt, node_id, zone,"
        " status, started_at, finished_at, duration_s, last_error)"
        " VALUES (%(id)s, %(tenant)s, %(name)s, %(slot)s, %(attempt)s, 'n1', 'z1', %(status)s,"
        " %(slot)s, %(slot)s, 0.25, %(error)s)",
        {
            "id": job.id,
            "tenant": job.tenant,
            "name": job.name,
            "slot": slot,
            "attempt": attempt,
            "status": status,
            "error": "boom" if status == "failed" else None,
        },
    )


async def test_runs_filters_orders_and_limits(store: JobStore, settings: ClusterSettings) -> None:
    a = await store.definitions.add(spec("a"), now=T0)
    b = await store.definitions.add(spec("b", tenant="acme"), now=T0)
    for i in range(5):
        await insert_run(settings, a, T0 + timedelta(minutes=5 * i), "succeeded")
    await insert_run(settings, a, T0 + timedelta(minutes=30), "failed", attempt=2)
    await insert_run(settings, b, T0 + timedelta(minutes=1), "skipped")

    everything = await store.runs()
    assert len(everything) == 7
    slots = [r.scheduled_for for r in everything]
    assert slots == sorted(slots, reverse=True), "newest slot first"
    newest = everything[0]
    assert (newest.job_name, newest.status, newest.attempt, newest.last_error) == (
        "a",
        "failed",
        2,
        "boom",
    )
    assert (newest.job_id, newest.node_id, newest.zone, newest.duration_s) == (
        a.id,
        "n1",
        "z1",
        0.25,
    )
    assert [r.status for r in await store.runs(status="failed")] == ["failed"]
    assert [r.job_name for r in await store.runs(tenant="acme")] == ["b"]
    assert len(await store.runs(job="a")) == 6
    assert await store.runs(job="a", tenant="acme") == []
    assert [r.scheduled_for for r in await store.runs(job="a", limit=2)] == slots[:2]
    with pytest.raises(InvalidInput):
        await store.runs(job="x\x00")
