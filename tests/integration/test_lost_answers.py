"""A statement that ran while its answer was lost with the lock session leaves nothing behind.

The node reaches Postgres through a chaos proxy that stalls the moment the answer of the
claim of one job passes through it, as a network that drops packets silently would: the
claim ran, the row is running under the node, and the node never hears of it. The node
gives up on its session, reconnects once the stall ends, and is alive all along, so
neither its own recovery of dead owners nor anyone else's applies to the row. It must
still take the slot back at once rather than leave it running until its lease expires.

What it takes back is only what none of its runs holds: a run in flight, a completion not
written yet, a claim being handed to a flight keep their rows. And a hand-over to a flight
(`spawn`, on the result writer) retried after its answer was lost runs the flight its
first try made.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

import pytest

from cluster.chaos.fleet import via_proxy
from cluster.chaos.servers.proxy import Proxy
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings, NodeSettings
from cluster.store.jobstore.store import JobStore
from node.maintenance.recovery import Recovery
from node.runtime import Node
from node.state import NodeState
from node.stats import Stats
from tests.helpers.flights import HANDLER, allow_job, flights, handed
from tests.helpers.sessions import ALL, T0, Opener, at
from tests.helpers.waiting import until

pytestmark = pytest.mark.timeout(60)

MARKER = "answer-lost-marker"
LEASE_S = 30.0


class Events(logging.Handler):
    """The ``event`` of every log record of the node."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append(str(getattr(record, "event", "")))


async def test_a_claim_whose_answer_was_lost_is_taken_back_when_the_session_returns(
    store: JobStore, settings: ClusterSettings, proxy: Proxy
) -> None:
    events = Events()
    logging.getLogger().addHandler(events)
    node = Node(
        replace(settings, database_url=via_proxy(settings.database_url, proxy.port)),
        NodeSettings(
            node_id="n1",
            session_timeout_s=4.0,
            statement_timeout_s=2.0,  # the node gives up on an answer after 3 s
            lease_s=LEASE_S,
            drain_timeout_s=1.0,
        ),
    )
    task = asyncio.create_task(node.run(signals=False))
    try:
        await until(
            lambda: node.state is not None and len(node.state.held) == 16,
            "the node to hold every shard",
            20,
        )
        proxy.stall_on(MARKER.encode())
        await store.definitions.add(
            JobSpec.build("lost", "@every 2s", "shell:true", payload={"m": MARKER})
        )
        await asyncio.wait_for(proxy.tripped.wait(), 10)
        job = await store.get("lost")
        assert (job.status, job.locked_by) == ("running", "n1"), "the claim did not apply"
        slot, token = job.slot_at, job.lease_token

        # The node has given up on the answer (and on its session) before the network heals.
        await until(lambda: "session_lost" in events.seen, "the session to be lost", 10)
        proxy.restore()

        async def slot_ran() -> bool:
            runs = await store.runs(job="lost")
            return any(r.scheduled_for == slot and r.status == "succeeded" for r in runs)

        # Well within the lease: before, the row stayed running under token `token` until
        # the lease expired and recovery took it back.
        await until(slot_ran, f"slot {slot} (claimed under token {token}) to run", 10)
        runs = {r.scheduled_for: r for r in await store.runs(job="lost")}
        assert runs[slot].attempt == 2, runs[slot]  # the lost claim counts as a lost attempt
    finally:
        logging.getLogger().removeHandler(events)
        node.stop.set()
        await asyncio.wait_for(task, 20)


async def test_only_rows_no_run_of_the_node_holds_are_taken_back(
    store: JobStore, open_session: Opener
) -> None:
    for name in ("kept", "lost"):
        await store.definitions.add(JobSpec.build(name, "@every 10s", HANDLER), now=T0)
    await allow_job(store)
    session = await open_session("n1")
    claimed = {job.name: job for job in (await session.claim(ALL, 10, 30.0, now=at(10))).jobs}
    assert set(claimed) == {"kept", "lost", "fan"}
    kept, fan = claimed["kept"], claimed["fan"]
    # The `allow` claim's flight exists, and the claim is still queued for its hand-over.
    assert await session.completions.spawn([handed(fan, at(20))], [], 30.0, now=at(10)) == {
        fan.id: True
    }
    held_jobs = {(kept.id, kept.lease_token)}
    held_flights = {(fan.id, fan.slot, fan.lease_token)}
    state = NodeState("n1", "z", 16)
    recovery = Recovery(state, session, Stats(), tracked=lambda: (held_jobs, held_flights))

    assert await recovery.take_back_untracked() == 1
    rows = {name: await store.get(name) for name in ("kept", "lost")}
    assert (rows["kept"].status, rows["kept"].lease_token) == ("running", kept.lease_token)
    assert (rows["lost"].status, rows["lost"].attempt, rows["lost"].locked_by) == ("idle", 2, None)
    assert [f[1:] for f in await flights(store)] == [("running", 1, "n1")]
    (run,) = await store.runs(job="lost")
    assert run.status == "lost" and "answer was lost" in (run.last_error or "")

    # Once the hand-over is written, the flight is nobody's if the node does not run it.
    held_flights.clear()
    assert await recovery.take_back_untracked() == 1
    assert [f[1:] for f in await flights(store)] == [("queued", 2, None)]
    assert await recovery.take_back_untracked() == 0


async def test_a_hand_over_to_a_flight_retried_after_its_answer_was_lost_runs_the_flight(
    store: JobStore, open_session: Opener
) -> None:
    # The result writer's `spawn` ran, its answer was lost with the connection, and the
    # completer writes it again on a new one: the job has moved on, so the claim's token
    # no longer matches; the flight it made is the node's to run all the same.
    await allow_job(store)
    session = await open_session("n1")
    (fan,) = (await session.claim(ALL, 10, 30.0, now=at(10))).jobs
    write = [handed(fan, at(20))]
    assert await session.completions.spawn(write, [], 30.0, now=at(10)) == {fan.id: True}
    assert await session.completions.spawn(write, [], 30.0, now=at(11)) == {fan.id: True}
    assert [f[1:] for f in await flights(store)] == [("running", 1, "n1")]
    job = await store.get("fan")
    assert (job.status, job.slot_at) == ("idle", at(20))

    # Another node's write of that claim is fenced as ever.
    other = await open_session("n2")
    assert await other.completions.spawn(write, [], 30.0, now=at(11)) == {}
