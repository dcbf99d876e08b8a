"""Every-node jobs composed with the operator's other actions (docs/design/each-node.md), on
real Postgres with an explicit clock: a cancel reaches every member (running runs asked to
stop, queued ones never started) and the slot closes ``cancelled``; a plain trigger fans
out like a scheduled slot, one with a payload or a rerun is refused; a slot a member failed
counts toward --pause-after-failures, a slot all succeeded resets the count; and an
every-node job is not made while a node of an older release runs."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from cluster.errors import InvalidInput, NotFound, NotRunning
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from cluster.store.lock.session import LockSession
from tests.helpers.cli import invoke
from tests.helpers.everynode import MEMBERS, every_node, fan_out, node_runs, slot_row
from tests.helpers.flights import HANDLER, ended, handed
from tests.helpers.outbox import add_rule, events
from tests.helpers.roles import Logins, grant_roles
from tests.helpers.sessions import ALL, Opener, at
from tests.helpers.waiting import until


async def _exited(settings: ClusterSettings, name: str) -> None:
    """Until the backend of the connection ``name`` closed has exited: a closed connection's
    locks stay in ``pg_locks`` for a moment."""
    async with await psycopg.AsyncConnection.connect(
        settings.database_url, autocommit=True
    ) as conn:

        async def exited() -> bool:
            cur = await conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)
            )
            row = await cur.fetchone()
            return row is not None and row[0] == 0

        await until(exited, f"the backend of {name} to exit")


async def test_a_cancel_stops_every_members_run_and_starts_none_of_the_queued(
    store: JobStore, open_session: Opener
) -> None:
    await every_node(store)
    a, b, c = [await open_session(n) for n in ("node-a", "node-b", "node-c")]
    mine, _ = await fan_out(a, 10, MEMBERS)
    (theirs,) = await b.flights.claim([], 10, 30.0, now=at(10))  # node-c's is still queued
    asked = await store.runcontrol.cancel("sweep", by="ops")
    assert sorted((r.node_id, r.queued) for r in asked) == [
        ("node-a", False),
        ("node-b", False),
        ("node-c", True),
    ]
    # node-c's run is recorded cancelled without starting: there is nothing left to claim.
    assert [m for m, _, _ in await node_runs(store)] == ["node-a", "node-b"]
    assert await c.flights.claim([], 10, 30.0, now=at(11)) == []
    # The running ones learn it at their renewal (or at once, by NOTIFY) and stop.
    renewed = await b.flights.renew([(theirs.id, at(10), theirs.lease_token)], 30.0)
    assert renewed == {(theirs.id, at(10)): "ops"}
    for session, run in ((a, mine), (b, theirs)):
        await session.completions.complete_flights([ended(run, "cancelled")], now=at(12))
    status, error, coverage = await slot_row(store, at(10))
    assert status == "cancelled"
    assert error == "3/3, node node-a cancelled, node node-b cancelled, node node-c cancelled"
    assert coverage["ended"]["node-c"]["why"] == "cancelled by ops"
    assert await node_runs(store) == []
    with pytest.raises(NotRunning):  # nothing of it runs any more
        await store.runcontrol.cancel("sweep", by="ops")


async def test_a_cancel_of_a_slot_none_started_closes_it_at_once(
    store: JobStore, open_session: Opener
) -> None:
    await every_node(store)
    a = await open_session("node-a")
    mine, _ = await fan_out(a, 10, MEMBERS)
    await a.completions.complete_flights([ended(mine)], now=at(11))
    asked = await store.runcontrol.cancel("sweep", by="ops", slot=at(10))
    assert all(r.queued for r in asked) and len(asked) == 2
    status, error, _ = await slot_row(store, at(10))
    assert (status, error) == (
        "cancelled",
        "3/3, node node-b cancelled, node node-c cancelled",
    )
    # The job goes on: its next slot fans out as any.
    job = await store.get("sweep")
    assert (job.status, job.slot_at) == ("idle", at(20))


async def test_a_cancelled_members_lost_run_is_recorded_cancelled(
    store: JobStore, open_session: Opener
) -> None:
    await every_node(store)
    a, b = await open_session("node-a"), await open_session("node-b")
    mine, _ = await fan_out(a, 10, MEMBERS[:2])
    await b.flights.claim([], 10, 30.0, now=at(10))
    await store.runcontrol.cancel("sweep", by="ops")
    await a.completions.complete_flights([ended(mine, "cancelled")], now=at(11))
    await a.flights.recover(ALL, ["node-a"], now=at(45))  # node-b died before it stopped
    _, error, coverage = await slot_row(store, at(10))
    assert error == "2/2, node node-a cancelled, node node-b cancelled"
    assert coverage["ended"]["node-b"]["why"] == "cancelled by ops"


async def test_several_open_slots_need_slot_or_all(store: JobStore, open_session: Opener) -> None:
    await every_node(store)
    a = await open_session("node-a")
    await fan_out(a, 10, MEMBERS)
    await fan_out(a, 20, MEMBERS)
    with pytest.raises(InvalidInput, match="2 slots of 'sweep' are running"):
        await store.runcontrol.cancel("sweep", by="ops")
    assert len(await node_runs(store)) == 6  # nothing was cancelled
    asked = await store.runcontrol.cancel("sweep", by="ops", every=True)
    assert {r.slot for r in asked} == {at(10), at(20)}


async def test_a_plain_trigger_fans_out_and_a_payload_or_rerun_is_refused(
    store: JobStore, open_session: Opener, settings: ClusterSettings
) -> None:
    await every_node(store)
    a = await open_session("node-a")
    await store.trigger("sweep", now=at(5))
    (job,) = (await a.claim(ALL, 10, 30.0, now=at(5))).jobs
    assert (job.slot, job.each_node) == (at(5), True)
    moved = await a.completions.spawn([handed(job, at(10))], [], 30.0, now=at(5), members=MEMBERS)
    assert moved[job.id]
    assert [m for m, _, _ in await node_runs(store)] == ["node-a", "node-b", "node-c"]
    cur = await store.db.conn.execute("SELECT origin FROM node_slots")
    assert [r["origin"] for r in await cur.fetchall()] == ["trigger"]
    before = await store.get("sweep")
    with pytest.raises(InvalidInput, match="a trigger with a payload would run on one node"):
        await store.inputs.trigger("sweep", payload={"x": 1}, now=at(6))
    with pytest.raises(InvalidInput, match="a rerun of a past slot would run on one node"):
        await store.inputs.trigger("sweep", slot=at(5), now=at(6))
    assert await store.get("sweep") == before
    result = await asyncio.to_thread(
        invoke, settings, "jobs", "trigger", "sweep", "--payload", "{}"
    )
    assert result.exit_code == 2 and "runs on every node" in result.output, result.output
    # With upstreams, a trigger would be an extra flight beside the held slot: refused too.
    up = JobSpec.build("up", "@every 10s", HANDLER)
    gated = JobSpec.build("gated", "@every 10s", HANDLER, each_node=True, after=["up"])
    await store.definitions.apply([up, gated], now=at(6))
    with pytest.raises(InvalidInput, match="a trigger beside its held slot"):
        await store.trigger("gated", now=at(7))
    cur = await store.db.conn.execute("SELECT count(*) AS n FROM flights")
    assert (await cur.fetchone())["n"] == 0  # nothing queued


async def _close(a: LockSession, b: LockSession, t: float, b_outcome: str) -> None:
    """Fan out the slot at ``t`` to node-a and node-b; node-a succeeds, node-b ends so."""
    mine, _ = await fan_out(a, t, MEMBERS[:2])
    (theirs,) = await b.flights.claim([], 10, 30.0, now=at(t))
    await a.completions.complete_flights([ended(mine)], now=at(t + 1))
    await b.completions.complete_flights([ended(theirs, b_outcome)], now=at(t + 2))


async def test_failed_member_runs_count_toward_pause_after_failures(
    store: JobStore, open_session: Opener, settings: ClusterSettings
) -> None:
    await add_rule(settings, "ops", "https://hooks.example.com/x", events="paused,recovered")
    await every_node(store, pause_after_failures=2)
    a, b = await open_session("node-a"), await open_session("node-b")
    await _close(a, b, 10, "failed")
    assert (await store.get("sweep")).failed_slots == 1
    await _close(a, b, 20, "succeeded")  # a slot all succeeded resets the count
    assert (await store.get("sweep")).failed_slots == 0
    await _close(a, b, 30, "timed_out")
    await _close(a, b, 40, "failed")
    job = await store.get("sweep")
    assert (job.failed_slots, job.paused, job.status) == (2, True, "paused")
    assert job.pause_note is not None
    assert job.pause_note.startswith("paused after 2 failed slots in a row; last error: 2/2")
    assert [(e["event"], e["slot"]) for e in await events(settings)] == [
        ("recovered", at(20)),
        ("paused", at(40)),
    ]
    # Paused: its next slot is not claimed.
    assert (await a.claim(ALL, 10, 30.0, now=at(60))).jobs == []


async def test_a_cancelled_or_unrun_slot_neither_counts_nor_resets(
    store: JobStore, open_session: Opener
) -> None:
    await every_node(store, pause_after_failures=3)
    a, b = await open_session("node-a"), await open_session("node-b")
    await _close(a, b, 10, "failed")
    await _close(a, b, 20, "cancelled")
    assert (await store.get("sweep")).failed_slots == 1
    # Every member missed it (their nodes died): no handler failed, none succeeded.
    await fan_out(a, 30, [("node-gone", "z")])
    await a.flights.recover(ALL, ["node-a"], now=at(31))
    status, _, _ = await slot_row(store, at(30))
    assert status == "failed"
    assert (await store.get("sweep")).failed_slots == 1


async def test_an_every_node_job_is_refused_while_an_older_node_runs(
    store: JobStore, open_session: Opener, settings: ClusterSettings
) -> None:
    await open_session("node-new")  # a node of this release: its lock session is marked
    spec = JobSpec.build("sweep", "@every 10s", HANDLER, each_node=True)
    await store.definitions.apply([spec])
    plain = JobSpec.build("plain", "@every 10s", HANDLER)
    await store.definitions.apply([plain])
    # A node of the previous release: a lock session holding a shard, without the mark.
    async with await psycopg.AsyncConnection.connect(
        settings.database_url, application_name="node-old", autocommit=True
    ) as old:
        await old.execute("SELECT pg_advisory_lock(%s, 3)", (settings.lock_namespace,))
        converted = JobSpec.build("plain", "@every 10s", HANDLER, each_node=True)
        before = await store.get("plain")
        message = "node node-old runs a release that does not know every-node jobs"
        with pytest.raises(InvalidInput, match=message):
            await store.definitions.apply([converted])
        with pytest.raises(InvalidInput, match=message):
            await store.definitions.add(JobSpec.build("more", "@hourly", HANDLER, each_node=True))
        assert await store.get("plain") == before
        with pytest.raises(NotFound):
            await store.get("more")
        args = ("jobs", "add", "more", "--schedule", "@hourly", "--handler", HANDLER)
        result = await asyncio.to_thread(invoke, settings, *args, "--each-node")
        assert result.exit_code == 2, result.output
        assert result.output.strip().count("\n") == 0 and message in result.output
        # An every-node job that is one already is written as before (re-applied, edited).
        await store.definitions.apply(
            [JobSpec.build("sweep", "@every 20s", HANDLER, each_node=True)]
        )
        # Ordinary jobs are not asked about.
        await store.definitions.apply([JobSpec.build("other", "@hourly", HANDLER)])
    # The old node gone, the conversion goes through.
    await _exited(settings, "node-old")
    await store.definitions.apply([converted])
    assert (await store.get("plain")).each_node


async def test_a_web_login_cancels_an_every_node_slot_and_sees_older_nodes(
    store: JobStore, open_session: Opener, settings: ClusterSettings, logins: Logins
) -> None:
    """The web's role only reads node_runs: the cancel goes through cancel_node_runs, as the
    owner, within the caller's tenant scope; the guard of a rolling upgrade reads pg_locks,
    which every login may."""
    await every_node(store)
    a = await open_session("node-a")
    mine, _ = await fan_out(a, 10, MEMBERS)
    await asyncio.to_thread(grant_roles, settings, logins)
    async with JobStore.open(logins.as_web(settings)) as web:
        asked = await web.runcontrol.cancel("sweep", by="token ops")
        assert sorted((r.node_id, r.queued) for r in asked) == [
            ("node-a", False),
            ("node-b", True),
            ("node-c", True),
        ]
        async with await psycopg.AsyncConnection.connect(
            settings.database_url, application_name="node-old", autocommit=True
        ) as old:
            await old.execute("SELECT pg_advisory_lock(%s, 3)", (settings.lock_namespace,))
            spec = JobSpec.build("more", "@hourly", HANDLER, each_node=True)
            with pytest.raises(InvalidInput, match="node node-old runs a release"):
                await web.definitions.apply([spec])
        await _exited(settings, "node-old")
    async with JobStore.open(logins.as_web(settings)) as web:
        other = JobStore(web.db.conn, web.settings, scope="acme")
        with pytest.raises(NotFound):  # another tenant's job: out of its reach
            await other.runcontrol.cancel("sweep", by="token x")
    assert [m for m, _, _ in await node_runs(store)] == ["node-a"]
    await a.completions.complete_flights([ended(mine, "cancelled")], now=at(12))
    status, _, _ = await slot_row(store, at(10))
    assert status == "cancelled"
