"""Each-node jobs in Postgres (docs/design/each-node.md): a claimed slot fanned out to the
live members (``spawn``), each member's run claimable by that member alone
(``claim_flights``), renewed and completed under its own token, retried on its member;
runs of dead members, expired leases and drained nodes recorded missed, never run
elsewhere (``recover_flights``, ``drain_node_runs``); the slot's run row written once,
by whichever end comes last, with the coverage as one line."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest

from cluster.errors import InvalidInput
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from cluster.store.observe.audit import Scope, audit_lines
from tests.helpers.cli import invoke
from tests.helpers.everynode import MEMBERS, every_node, fan_out, node_runs, slot_row
from tests.helpers.flights import HANDLER, ended, handed
from tests.helpers.outbox import add_rule, events
from tests.helpers.sessions import ALL, T0, Opener, at


async def test_a_slot_runs_once_on_every_member_and_closes_when_the_last_ends(
    store: JobStore, open_session: Opener
) -> None:
    await every_node(store)
    a, b, c = [await open_session(n) for n in ("node-a", "node-b", "node-c")]
    mine, room = await fan_out(a, 10, MEMBERS)
    assert room  # node-a's own run starts at once
    assert await node_runs(store) == [
        ("node-a", "running", 1),
        ("node-b", "queued", 1),
        ("node-c", "queued", 1),
    ]
    job = await store.get("sweep")
    assert (job.status, job.slot_at) == ("idle", at(20))  # the job moved on
    # Each member claims its own run, whatever shards it holds, and no other's.
    assert await a.flights.claim([], 10, 30.0, now=at(10)) == []
    (theirs_b,) = await b.flights.claim([], 10, 30.0, now=at(10))
    (theirs_c,) = await c.flights.claim([], 10, 30.0, now=at(10))
    assert (theirs_b.flight, theirs_b.slot, theirs_b.each_node) == (True, at(10), True)
    assert await b.flights.claim([], 10, 30.0, now=at(10)) == []
    # Renewal and completion are the member's alone, fenced on its token.
    renewed = await b.flights.renew([(theirs_b.id, at(10), theirs_b.lease_token)], 30.0)
    assert renewed == {(theirs_b.id, at(10)): None}
    # Keyed by member: a node of the ring that does not run it renews and ends nothing.
    x = await open_session("node-x")
    assert await x.flights.renew([(theirs_b.id, at(10), theirs_b.lease_token)], 30.0) == {}
    assert await x.completions.complete_flights([ended(theirs_b)], now=at(11)) == set()
    for session, run in ((a, mine), (b, theirs_b)):
        done = await session.completions.complete_flights([ended(run)], now=at(11))
        assert done == {(run.id, at(10))}
    # Open until every member's run ended, listed as running with its coverage so far.
    (open_slot,) = await store.runs(job="sweep")
    assert (open_slot.status, open_slot.scheduled_for) == ("running", at(10))
    assert open_slot.last_error == "2/3, node node-c running"
    await c.completions.complete_flights([ended(theirs_c)], now=at(12))
    status, error, coverage = await slot_row(store, at(10))
    assert (status, error, coverage["summary"]) == ("succeeded", "3/3", "3/3")
    assert coverage["members"] == ["node-a", "node-b", "node-c"]
    assert await node_runs(store) == []


async def test_a_dead_members_run_is_missed_not_moved(
    store: JobStore, open_session: Opener, settings: ClusterSettings
) -> None:
    await add_rule(settings, "ops", "https://hooks.example.com/x", events="incomplete,failed")
    await every_node(store)
    a, b = await open_session("node-a"), await open_session("node-b")
    members = [*MEMBERS[:2], ("node-gone", "z")]  # node-gone: no heartbeat, no session
    mine, _ = await fan_out(a, 10, members)
    (theirs,) = await b.flights.claim([], 10, 30.0, now=at(10))
    assert await a.flights.recover(ALL, ["node-a", "node-b"], now=at(12)) == []
    assert [m for m, _, _ in await node_runs(store)] == ["node-a", "node-b"]
    await a.completions.complete_flights([ended(mine)], now=at(13))
    await b.completions.complete_flights([ended(theirs)], now=at(14))
    status, error, coverage = await slot_row(store, at(10))
    assert status == "succeeded"
    assert error == "2/3, node node-gone missed (died 00:00:12)"
    assert coverage["ended"]["node-gone"]["why"] == "died"
    # The slot a node missed raises `incomplete` once, its coverage as the detail.
    assert [(e["event"], e["slot"], e["detail"]) for e in await events(settings)] == [
        ("incomplete", at(10), error)
    ]
    # `pulse runs show` names each node's end; --json has the coverage.
    args = ("runs", "show", "sweep", "--slot", at(10).isoformat())
    shown = await asyncio.to_thread(invoke, settings, *args)
    assert "node node-gone  missed (died)" in shown.output, shown.output
    listed = await asyncio.to_thread(invoke, settings, "jobs", "show", "sweep")
    assert f"succeeded attempt 1  node-b  {error}" in listed.output, listed.output
    as_json = json.loads((await asyncio.to_thread(invoke, settings, *args, "--json")).output)
    assert as_json["coverage"]["summary"] == error
    assert as_json["coverage"]["members"] == ["node-a", "node-b", "node-gone"]


async def test_a_member_killed_mid_run_is_missed_and_its_late_end_fenced(
    store: JobStore, open_session: Opener
) -> None:
    await every_node(store)
    a, b = await open_session("node-a"), await open_session("node-b")
    mine, _ = await fan_out(a, 10, MEMBERS[:2])
    (theirs,) = await b.flights.claim([], 10, 30.0, now=at(10))
    await a.completions.complete_flights([ended(mine)], now=at(11))
    # node-b left the ring and its lease ran out (at 40): missed, never queued for another.
    await a.flights.recover(ALL, ["node-a"], now=at(45))
    assert await node_runs(store) == []
    assert await b.completions.complete_flights([ended(theirs)], now=at(46)) == set()
    status, error, _ = await slot_row(store, at(10))
    assert (status, error) == ("succeeded", "1/2, node node-b missed (died 00:00:45)")


async def test_a_draining_member_records_its_runs_missed(
    store: JobStore, open_session: Opener
) -> None:
    await every_node(store)
    a, b = await open_session("node-a"), await open_session("node-b")
    mine, _ = await fan_out(a, 10, MEMBERS[:2])
    drained = await b.flights.drain(now=at(11))
    assert [(job_id, slot, summary) for job_id, slot, summary in drained] == [
        (mine.id, at(10), None)
    ]
    await a.completions.complete_flights([ended(mine)], now=at(12))
    _, error, _ = await slot_row(store, at(10))
    assert error == "1/2, node node-b missed (drained 00:00:11)"


async def test_a_failed_member_run_is_retried_on_its_member_and_fails_the_slot(
    store: JobStore, open_session: Opener
) -> None:
    await every_node(store, retries=1)
    a, b = await open_session("node-a"), await open_session("node-b")
    mine, _ = await fan_out(a, 10, MEMBERS[:2])
    (theirs,) = await b.flights.claim([], 10, 30.0, now=at(10))
    retry = ended(theirs, "failed", retry_at=at(15))
    assert await b.completions.complete_flights([retry], now=at(11)) == {(theirs.id, at(10))}
    assert ("node-b", "queued", 2) in await node_runs(store)
    assert await a.flights.claim([], 10, 30.0, now=at(16)) == []  # never another member's
    assert await b.flights.claim([], 10, 30.0, now=at(14)) == []  # its backoff first
    (again,) = await b.flights.claim([], 10, 30.0, now=at(16))
    assert again.attempt == 2
    await b.completions.complete_flights([ended(again, "failed")], now=at(17))
    await a.completions.complete_flights([ended(mine)], now=at(18))
    status, error, _ = await slot_row(store, at(10))
    assert (status, error) == ("failed", "2/2, node node-b failed")


async def test_no_live_member_in_its_zones_records_the_slot_skipped(
    store: JobStore, open_session: Opener
) -> None:
    await every_node(store, zones="eu-1,eu-2")
    a = await open_session("node-a", "eu-1")
    shard = (await store.get("sweep")).shard
    _, room = await fan_out(a, 10, [("node-a", "us-1"), ("node-b", None)], [shard])
    assert not room
    status, error, _ = await slot_row(store, at(10))
    assert (status, error) == ("skipped", "no live node in zones eu-1,eu-2")
    # Of the members, only those of its zones.
    _, room = await fan_out(a, 20, [("node-a", "eu-1"), ("node-b", "us-1")], [shard])
    assert room and await node_runs(store) == [("node-a", "running", 1)]


async def test_a_lost_answer_of_the_fan_out_runs_the_callers_run_again(
    store: JobStore, open_session: Opener
) -> None:
    await every_node(store)
    a = await open_session("node-a")
    (job,) = (await a.claim(ALL, 10, 30.0, now=at(10))).jobs
    spawn = [handed(job, at(20))]
    first = await a.completions.spawn(spawn, [], 30.0, now=at(10), members=MEMBERS)
    again = await a.completions.spawn(spawn, [], 30.0, now=at(10), members=MEMBERS)
    assert first == again == {job.id: True}
    assert len(await node_runs(store)) == 3


@pytest.mark.parametrize(
    ("ended_json", "summary"),
    [
        ('{"n1": {"status": "succeeded"}, "n2": {"status": "succeeded"}}', "2/2"),
        (
            '{"n1": {"status": "succeeded"},'
            ' "n2": {"status": "missed", "why": "died", "at": "2026-01-01T14:02:11Z"}}',
            "1/2, node n2 missed (died 14:02:11)",
        ),
        (
            '{"n1": {"status": "timed_out"}, "n2": {"status": "cancelled"}}',
            "2/2, node n1 timed out, node n2 cancelled",
        ),
        ('{"n1": {"status": "succeeded"}}', "1/2, node n2 running"),
    ],
)
async def test_the_coverage_line(store: JobStore, ended_json: str, summary: str) -> None:
    cur = await store.db.conn.execute(
        "SELECT node_slot_summary(ARRAY['n1', 'n2'], %(e)s::jsonb) AS s", {"e": ended_json}
    )
    row = await cur.fetchone()
    assert row is not None and row["s"] == summary


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"schedule": "@after:up"}, "a chained (@after:) job cannot run on every node"),
        ({"schedule": "@at 2030-01-01T00:00:00Z"}, "a one-off (@at) job cannot run on every node"),
        ({"overlap": "allow"}, "one run per node: overlap allow does not apply"),
        ({"each_zone": True}, "choose every node or every zone"),
        ({"max_runs": 3}, "max_runs does not apply"),
        ({"each_node": "yes"}, "must be true or false"),
    ],
)
async def test_bad_input_is_refused_and_nothing_written(
    store: JobStore, options: dict[str, Any], message: str
) -> None:
    entry = {"name": "sweep", "schedule": "@every 10s", "handler": HANDLER, "each_node": True}
    with pytest.raises(InvalidInput, match=re.escape(message)):
        spec = JobSpec.from_mapping({**entry, **options})
        await store.definitions.apply([spec], now=T0)
    assert await store.jobs() == []


async def test_a_member_runs_one_slot_of_the_job_at_a_time(
    store: JobStore, open_session: Opener
) -> None:
    await every_node(store)
    a, b = await open_session("node-a"), await open_session("node-b")
    first, _ = await fan_out(a, 10, MEMBERS[:2])
    # Its run of 10 still going, the caller's run of 20 waits queued like node-b's.
    _, room = await fan_out(a, 20, MEMBERS[:2])
    assert not room
    assert await a.flights.claim([], 10, 30.0, now=at(20)) == []
    await a.completions.complete_flights([ended(first)], now=at(21))
    # Then the oldest first; a run due a moment later is claimed ahead, to start on time.
    (second,) = await a.flights.claim([], 10, 30.0, now=at(21))
    assert second.slot == at(20)
    (b10,) = await b.flights.claim([], 10, 30.0, now=at(21))
    await b.completions.complete_flights([ended(b10)], now=at(22))
    assert await b.flights.claim([], 10, 30.0, now=at(19.5)) == []
    (b20,) = await b.flights.claim([], 10, 30.0, now=at(19.5), ahead_s=1.0)
    assert (b20.slot, b20.due) == (at(20), at(20))


async def test_the_audit_finds_every_slot_with_its_coverage(
    store: JobStore, open_session: Opener
) -> None:
    await every_node(store)
    # Revisions are stamped by the database's clock: this job was made at T0.
    await store.db.conn.execute("UPDATE job_revisions SET at = %(t)s", {"t": T0})
    a, b = await open_session("node-a"), await open_session("node-b")
    mine, _ = await fan_out(a, 10, MEMBERS[:2])
    await a.completions.complete_flights([ended(mine)], now=at(11))
    await b.flights.drain(now=at(12))
    _, room = await fan_out(a, 20, [])  # nobody alive at the claim: recorded skipped
    assert not room
    scope = Scope(T0, at(25), grace_s=0.0, now=at(25))
    lines = [line async for line in audit_lines(store.db.conn, scope)]
    assert [(line.slot, line.verdict, line.detail) for line in lines] == [
        (at(10), "ran", "1/2, node node-b missed (drained 00:00:12)"),
        (at(20), "skipped", "no live node"),
    ]


async def test_the_audit_finds_a_slot_whose_member_runs_go_on_running(
    store: JobStore, open_session: Opener
) -> None:
    # A member's run that outlives the grace (a long handler, or a member that died with
    # it until its lease expires) keeps the slot open: the audit called it missing.
    await every_node(store)
    await store.db.conn.execute("UPDATE job_revisions SET at = %(t)s", {"t": T0})
    a = await open_session("node-a")
    await fan_out(a, 10, MEMBERS[:2])
    scope = Scope(T0, at(19), grace_s=0.0, now=at(19))
    lines = [line async for line in audit_lines(store.db.conn, scope)]
    assert [(line.slot, line.verdict) for line in lines] == [(at(10), "running")]


async def test_a_closed_slot_releases_the_jobs_chained_after_it(
    store: JobStore, open_session: Opener
) -> None:
    await every_node(store)
    await store.definitions.apply([JobSpec.build("after", "@after:sweep", HANDLER)], now=T0)
    a = await open_session("node-a")
    mine, _ = await fan_out(a, 10, MEMBERS[:1])
    await a.completions.complete_flights([ended(mine)], now=at(11))
    cur = await store.db.conn.execute("SELECT job_id, slot FROM chain_slots")
    released = [(r["job_id"], r["slot"]) for r in await cur.fetchall()]
    assert released == [((await store.get("after")).id, at(10))]


async def test_a_released_member_run_goes_back_to_its_member_alone(
    store: JobStore, open_session: Opener
) -> None:
    await every_node(store)
    a, b = await open_session("node-a"), await open_session("node-b")
    await fan_out(a, 10, MEMBERS[:2])
    (lost,) = await b.flights.claim([], 10, 30.0, now=at(10))
    # A claim whose answer was lost with the session: found running under node-b, released.
    _, held = await b.held_runs()
    assert (lost.id, at(10), lost.lease_token) in held
    lease = (lost.id, at(10), lost.lease_token)
    assert await b.flights.release([lease], "answer lost", now=at(11)) == {(lost.id, at(10))}
    assert ("node-b", "queued", 1) in await node_runs(store)
    assert await a.flights.claim([], 10, 30.0, now=at(11)) == []
    assert await b.completions.complete_flights([ended(lost)], now=at(11)) == set()  # fenced
    (again,) = await b.flights.claim([], 10, 30.0, now=at(11))
    assert again.lease_token > lost.lease_token
