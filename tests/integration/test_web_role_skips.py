"""The writes of the slot ledger made by a real login of the web's role (``pulse init
--roles``): the skipped records a pause, skip-next or a calendar job's creation writes, and
the flight a trigger queues. The role may not insert runs nor flights, so they go through
``record_skipped`` and ``trigger_flight``, functions that run as the schema's owner
(docs/design/roles.md), and those write nothing else: no record over another, none for a
slot the job has passed already, none outside the caller's tenant scope, no flight at a
past instant nor past ten waiting."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import psycopg
from psycopg import sql

from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from cluster.store.lock.session import LockSession
from cluster.timing.calendars import Calendar
from node.membership.eachzone import ZoneChildren
from node.state import NodeState
from tests.helpers.history import rows
from tests.helpers.roles import Logins, grant_roles

T0 = datetime(2031, 12, 22, 10, 0, 30, tzinfo=UTC)
SLOT = datetime(2031, 12, 22, 10, 1, tzinfo=UTC)  # each job's first slot
MINUTE = timedelta(minutes=1)
HANDLER = "cluster.chaos.witness:record"


async def _records(store: JobStore, name: str) -> dict[datetime, tuple[str, str]]:
    runs = await store.runs(name, "acme", limit=50)
    return {r.scheduled_for: (r.status, r.last_error or "") for r in runs}


async def test_a_web_login_pauses_jobs_that_owe_slots_and_skips_next(
    settings: ClusterSettings, store: JobStore, logins: Logins
) -> None:
    """Found by the slot ledger's work: a pause of a job whose slot a window deferred (or
    its gate holds) records that slot skipped, and over the API the insert was refused."""
    for name in ("paused", "until", "skipped"):
        await store.definitions.add(
            JobSpec.build(name, "@every 1m", HANDLER, tenant="acme"), now=T0
        )
        if name != "skipped":  # its slot deferred to 10:03: owed once 10:01 has come
            await store.windows.add(
                T0, T0 + 2 * MINUTE + timedelta(seconds=30), job=name, tenant="acme",
                defer=True, now=T0,
            )  # fmt: skip
    await asyncio.to_thread(grant_roles, settings, logins)
    later = SLOT + timedelta(seconds=30)
    async with JobStore.open(logins.as_web(settings)) as web:
        await web.pause("paused", "acme", now=later)
        await web.holds.pause_until("until", "acme", later + 5 * MINUTE, now=later)
        assert await web.holds.skip_next("skipped", "acme", 2, now=T0) == [SLOT, SLOT + MINUTE]
    for name in ("paused", "until"):
        ((slot, (status, why)),) = (await _records(store, name)).items()
        assert (slot, status) == (SLOT, "skipped") and "paused before it ran" in why, why
    skipped = await _records(store, "skipped")
    assert sorted(skipped) == [SLOT, SLOT + MINUTE]
    assert {s for s, _ in skipped.values()} == {"skipped"}
    assert (await store.get("skipped", "acme")).slot_at == SLOT + 2 * MINUTE


async def test_record_skipped_writes_only_skips_of_slots_still_to_come_in_scope(
    settings: ClusterSettings, store: JobStore, logins: Logins
) -> None:
    """Called directly by a web login: a past slot before the job's slot (history), another
    tenant's job, a slot with a record already or a skip without a reason: nothing."""
    job = await store.definitions.add(
        JobSpec.build("j", "@every 1m", HANDLER, tenant="acme"), now=T0
    )
    await store.holds.skip_next("j", "acme", 1, now=T0)  # 10:01 recorded; the job at 10:02
    await asyncio.to_thread(grant_roles, settings, logins)
    ahead = SLOT + 2 * MINUTE

    def call(scope: str | None, skips: list[list[str | None]]) -> list[datetime]:
        with psycopg.connect(logins.as_web(settings).database_url, autocommit=True) as conn:
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(settings.schema)))
            rows = conn.execute(
                "SELECT * FROM record_skipped(%s, %s, %s::json, NULL)",
                (job.id, scope, json.dumps(skips)),
            ).fetchall()
        return [row[0] for row in rows]

    past = datetime(2025, 1, 1, 9, 0, tzinfo=UTC).isoformat()  # before the job and now()
    assert call("acme", [[past, "forged"], [SLOT.isoformat(), "again"]]) == []
    assert call("other", [[ahead.isoformat(), "not mine"]]) == []
    assert call("acme", [[ahead.isoformat(), None], [ahead.isoformat(), ""]]) == []
    assert call("acme", [[ahead.isoformat(), "skipped by pulse jobs skip-next"]]) == [ahead]
    records = await _records(store, "j")
    assert records[SLOT] == ("skipped", "skipped by pulse jobs skip-next")
    assert sorted(records) == [SLOT, ahead]


async def test_withdraw_rule_skips_takes_back_only_a_rules_skips_still_to_come_in_scope(
    settings: ClusterSettings, store: JobStore, logins: Logins
) -> None:
    """Called directly by a web login: another tenant's job, a skip-next record and a rule's
    record of a slot past by the database's clock are kept; a window's skips still to
    come are the only records it takes back."""
    job = await store.definitions.add(
        JobSpec.build("j", "@every 1m", HANDLER, tenant="acme"), now=T0
    )
    await store.windows.add(T0, SLOT + 2 * MINUTE, job="j", tenant="acme", now=T0)
    await store.holds.skip_next("j", "acme", 1, now=T0)  # 10:03; the job at 10:04
    past = datetime(2025, 1, 1, 9, 0, tzinfo=UTC)  # before now(): history
    await store.db.conn.execute(
        "INSERT INTO runs (job_id, tenant_id, job_name, scheduled_for, status, last_error)"
        " VALUES (%s, 'acme', 'j', %s, 'skipped', 'calendar old: 2025-01-01 is a holiday')",
        (job.id, past),
    )
    await asyncio.to_thread(grant_roles, settings, logins)

    def call(scope: str) -> list[datetime]:
        with psycopg.connect(logins.as_web(settings).database_url, autocommit=True) as conn:
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(settings.schema)))
            rows = conn.execute(
                "SELECT * FROM withdraw_rule_skips(%s, %s, %s)", (job.id, scope, past)
            ).fetchall()
        return sorted(row[0] for row in rows)

    assert call("other") == []
    assert call("acme") == [SLOT, SLOT + MINUTE]  # the window's, not its clock's `past`
    records = await _records(store, "j")
    assert records == {
        past: ("skipped", "calendar old: 2025-01-01 is a holiday"),
        SLOT + 2 * MINUTE: ("skipped", "skipped by pulse jobs skip-next"),
    }


async def test_a_web_login_cannot_make_a_skip_stand_for_slots_before_the_jobs_own(
    settings: ClusterSettings, store: JobStore, logins: Logins
) -> None:
    """A skipped record may stand for the slots before it (runs.skipped_from, an outage's
    unlisted slots), which ``pulse audit`` then counts skipped. Called directly, a web login
    could try to cover a job's past (slots it ran, missed or never recorded) with one skip
    of a slot still to come: the time is dropped unless it lies between the job's slot and
    the database's clock (slots passed already, as an outage's)."""
    job = await store.definitions.add(
        JobSpec.build("j", "@every 1m", HANDLER, tenant="acme"), now=T0
    )
    await asyncio.to_thread(grant_roles, settings, logins)
    ahead, further = SLOT + 3 * MINUTE, SLOT + 5 * MINUTE

    def call(skips: list[list[str]]) -> list[datetime]:
        with psycopg.connect(logins.as_web(settings).database_url, autocommit=True) as conn:
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(settings.schema)))
            rows = conn.execute(
                "SELECT * FROM record_skipped(%s, 'acme', %s::json, NULL)",
                (job.id, json.dumps(skips)),
            ).fetchall()
        return [row[0] for row in rows]

    history = datetime(2025, 1, 1, 9, 0, tzinfo=UTC).isoformat()
    assert call([[ahead.isoformat(), "forged", history]]) == [ahead]
    # Nor over slots still to come (the job's own slot in 2031 is after the clock).
    assert call([[further.isoformat(), "skipped ahead", SLOT.isoformat()]]) == [further]
    # A time after the slot it would stand for is refused outright.
    last = further + 2 * MINUTE
    assert call([[last.isoformat(), "upside down", (last + MINUTE).isoformat()]]) == []
    standing = await rows(
        settings,
        "SELECT scheduled_for, skipped_from FROM runs WHERE job_id = %s ORDER BY 1",
        (job.id,),
    )
    assert [(r["scheduled_for"], r["skipped_from"]) for r in standing] == [
        (ahead, None),
        (further, None),
    ]


async def test_a_web_login_creates_a_calendar_job_on_an_excluded_day(
    settings: ClusterSettings, store: JobStore, logins: Logins
) -> None:
    """A job created on a Saturday records its calendar's weekend slots skipped: over the
    API the insert was refused, and the job was not created."""
    saturday = datetime(2031, 12, 20, 10, 0, tzinfo=UTC)
    await store.calendars.put(Calendar("weekdays", frozenset(range(5)), frozenset()), now=saturday)
    await asyncio.to_thread(grant_roles, settings, logins)
    spec = JobSpec.build("d", "0 9 * * *", HANDLER, tenant="acme", calendar="weekdays")
    async with JobStore.open(logins.as_web(settings)) as web:
        await web.definitions.add(spec, now=saturday)
    sunday = datetime(2031, 12, 21, 9, 0, tzinfo=UTC)
    ((slot, (status, why)),) = (await _records(store, "d")).items()
    assert (slot, status) == (sunday, "skipped") and why, why
    assert (await store.get("d", "acme")).slot_at == sunday + timedelta(days=1)


async def test_a_web_login_triggers_a_job_past_skipped_slots_and_with_a_payload(
    settings: ClusterSettings, store: JobStore, logins: Logins
) -> None:
    """A trigger of a job skip-next moved past recorded slots, or with a payload, queues a
    flight: over the API the insert into flights was refused."""
    for name in ("skipped", "fed"):
        await store.definitions.add(
            JobSpec.build(name, "@every 1m", HANDLER, tenant="acme", api_run=True)
        )
    await store.holds.skip_next("skipped", "acme", 2)
    slot = (await store.get("skipped", "acme")).slot_at
    await asyncio.to_thread(grant_roles, settings, logins)
    async with JobStore.open(logins.as_web(settings)) as web:
        await web.trigger("skipped", "acme")
        fed = await web.inputs.trigger("fed", "acme", payload={"x": 1})
    assert (await store.get("skipped", "acme")).slot_at == slot  # kept past the records
    assert fed.origin == "trigger" and fed.payload == {"x": 1}
    queued = await rows(
        settings,
        "SELECT j.name, f.origin, f.status, f.payload FROM flights f"
        " JOIN jobs j ON j.id = f.job_id ORDER BY j.name",
    )
    assert [tuple(q.values()) for q in queued] == [
        ("fed", "trigger", "queued", {"x": 1}),
        ("skipped", "trigger", "queued", None),
    ]


async def test_trigger_flight_queues_only_now_in_scope_and_at_most_ten(
    settings: ClusterSettings, store: JobStore, logins: Logins
) -> None:
    """Called directly by a web login: a past instant is not taken (the flight is stamped
    with the database's clock, so it never lands on a slot that has a record), another
    tenant's job gets nothing, and no more than 10 wait whatever the caller asks."""
    job = await store.definitions.add(JobSpec.build("t", "@every 1m", HANDLER, tenant="acme"))
    await asyncio.to_thread(grant_roles, settings, logins)

    def call(scope: str, now: datetime | None, most: int) -> list[datetime]:
        with psycopg.connect(logins.as_web(settings).database_url, autocommit=True) as conn:
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(settings.schema)))
            found = []
            for _ in range(12):  # each in a transaction of its own: its own instant
                rows_ = conn.execute(
                    "SELECT * FROM trigger_flight(%s, %s, NULL, %s, %s)",
                    (job.id, scope, now, most),
                ).fetchall()
                found += [row[0] for row in rows_]
        return found

    assert call("other", None, 10) == []
    past = datetime(2025, 1, 1, tzinfo=UTC)
    queued = call("acme", past, 1000)
    assert len(queued) == 10 and min(queued) > past + timedelta(days=300)


async def test_a_web_login_applies_a_new_timing_past_overdue_slots(
    settings: ClusterSettings, store: JobStore, logins: Logins
) -> None:
    """The overdue slots a new timing moves a job past (docs/design/gates.md) are recorded
    before the job moves, so a login that writes no past runs records them too: these slots
    are past by the database's clock, and only those from the job's slot on may be."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    await store.definitions.add(
        JobSpec.build("moved", "@every 1m", HANDLER, tenant="acme"), now=start
    )
    await asyncio.to_thread(grant_roles, settings, logins)
    outage = start + 3 * MINUTE + timedelta(seconds=30)  # 00:01, 00:02 and 00:03 overdue
    async with JobStore.open(logins.as_web(settings)) as web:
        spec = JobSpec.build("moved", "@every 5m", HANDLER, tenant="acme")
        await web.definitions.apply([spec], now=outage)
    records = await _records(store, "moved")
    assert sorted(records) == [start + n * MINUTE for n in (1, 2, 3)]
    assert {status for status, _ in records.values()} == {"skipped"}
    assert all("a new timing moved the job past it" in why for _, why in records.values())


async def test_a_web_login_lowers_max_runs_past_overdue_slots(
    settings: ClusterSettings, store: JobStore, logins: Logins
) -> None:
    """An apply over the API that lowers a job's max_runs to the runs it ran makes it done
    at once: the overdue slots it owed are recorded before it is done, as for a new
    timing, so the web's login records them too."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    await store.definitions.add(
        JobSpec.build("capped", "@every 1m", HANDLER, tenant="acme", max_runs=5), now=start
    )
    await rows(settings, "UPDATE jobs SET runs_done = 2 WHERE name = 'capped' RETURNING 1")
    await asyncio.to_thread(grant_roles, settings, logins)
    outage = start + 2 * MINUTE + timedelta(seconds=30)  # 00:01 and 00:02 overdue
    async with JobStore.open(logins.as_web(settings)) as web:
        spec = JobSpec.build("capped", "@every 1m", HANDLER, tenant="acme", max_runs=2)
        assert (await web.definitions.apply([spec], now=outage)).updated == ["acme/capped"]
    assert (await store.get("capped", "acme")).status == "done"
    records = await _records(store, "capped")
    assert records == {
        start + n * MINUTE: (
            "skipped",
            "skipped by pulse jobs apply: max_runs 2 reached before it ran",
        )
        for n in (1, 2)
    }


async def test_a_web_login_moves_an_each_zone_jobs_child_with_its_records(
    settings: ClusterSettings, store: JobStore, logins: Logins
) -> None:
    """An apply over the API of a new timing of an each-zone job whose child's slots are
    due and not run, then a pause of the job: the child's records go through
    ``record_skipped`` before the child moves (it writes none for a slot the job has passed
    already), and the pause records the slot the child owes under the new timing."""
    each = {"tenant": "acme", "each_zone": True}
    await store.definitions.apply([JobSpec.build("sweep", "@every 1m", HANDLER, **each)], now=T0)
    session = LockSession(settings, "n1", "z", session_timeout_s=10, statement_timeout_s=5)
    await session.open()
    try:
        assert await ZoneChildren(NodeState("n1", "z", 16), session).run_once(T0)
    finally:
        await session.close()
    assert (await store.get("sweep@z", "acme")).slot_at == SLOT
    await asyncio.to_thread(grant_roles, settings, logins)
    later = SLOT + 2 * MINUTE + timedelta(seconds=30)  # 10:01, 10:02, 10:03 due, not run
    async with JobStore.open(logins.as_web(settings)) as web:
        new = JobSpec.build("sweep", "@every 2m", HANDLER, **each)
        assert (await web.definitions.apply([new], now=later)).updated == ["acme/sweep"]
        moved = await _records(store, "sweep@z")
        assert sorted(moved) == [SLOT, SLOT + MINUTE, SLOT + 2 * MINUTE]
        assert {why.split(":")[0] for _, why in moved.values()} == {"skipped by pulse jobs apply"}
        assert (await store.get("sweep@z", "acme")).slot_at == SLOT + 3 * MINUTE  # 10:04
        await web.pause("sweep", "acme", now=SLOT + 4 * MINUTE)  # 10:05: 10:04 owed
    records = await _records(store, "sweep@z")
    assert records[SLOT + 3 * MINUTE] == (
        "skipped",
        "skipped by pulse jobs pause: paused before it ran",
    )
    assert (await store.get("sweep@z", "acme")).paused
    assert not await _records(store, "sweep"), "the parent never runs: nothing recorded on it"
