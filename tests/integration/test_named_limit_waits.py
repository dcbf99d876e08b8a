"""How long a slot waits behind a named limit (docs/design/limits.md, "Passing over" and
"Waking"): a full key at the head of a shard hides none of the shard's other due jobs; a
slot let in by its key runs, so every token of a rate key is a start; a claim passed over
for a rate key says when the key's window reopens, and the claim loop sleeps no longer; a
slot that stops waiting any other way ends its wait."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.housekeeping import backfills
from cluster.store.jobstore.store import JobStore
from cluster.store.lock.records import ClaimedJob
from cluster.store.lock.session import LockSession
from cluster.store.observe.audit import Scope, audit_lines
from cluster.store.side import SideConnection
from node.pipeline.outcomes import plan_at_claim
from tests.helpers.history import finish
from tests.helpers.sessions import T0, Opener, at, completion

HANDLER = "cluster.chaos.witness:record"
SHARD = 5


async def node_over(
    store: JobStore, open_session: Opener, specs: list[JobSpec], **keys: dict[str, Any]
) -> LockSession:
    """The keys and the jobs, every job in shard SHARD (the claim reads a shard's oldest due
    jobs first), and a node holding that shard."""
    for name, limits in keys.items():
        await store.limits.set(name, **limits)
    await store.definitions.apply(specs, now=T0)
    await store.db.conn.execute("UPDATE jobs SET shard_id = %s", (SHARD,))
    node = await open_session("n1")
    await node.try_lock([SHARD])
    return node


def keyed(prefix: str, count: int, schedule: str, **options: Any) -> list[JobSpec]:
    return [JobSpec.build(f"{prefix}-{i:02d}", schedule, HANDLER, **options) for i in range(count)]


async def test_a_full_key_at_the_head_of_a_shard_hides_no_other_due_job(
    store: JobStore, open_session: Opener
) -> None:
    # Twelve jobs of a full key due at 10 s, then, later in the same shard, a job without a
    # key and one whose key has room.
    specs = [
        *keyed("heavy", 12, "@every 10s", uses="warehouse"),
        JobSpec.build("plain", "@every 15s", HANDLER),
        JobSpec.build("light", "@every 15s", HANDLER, uses="spare"),
    ]
    n1 = await node_over(
        store, open_session, specs, warehouse={"max_concurrent": 1}, spare={"max_concurrent": 5}
    )
    (holder,) = (await n1.claim([SHARD], 1, 30.0, now=at(11))).jobs
    assert holder.name.startswith("heavy")
    # The shard's eleven oldest due jobs wait for the warehouse: a claim of 3 reads more
    # than its four heads, and takes the two jobs behind them at once.
    result = await n1.claim([SHARD], 3, 30.0, now=at(16))
    assert sorted(j.name for j in result.jobs) == ["light", "plain"]
    waiting = {w["job"] for k in await store.limits.keys() for w in k.waiters}
    assert waiting and all(n.startswith("heavy") for n in waiting)
    # They stay passed over, never locked, while the key is full.
    assert (await n1.claim([SHARD], 3, 30.0, now=at(17))).jobs == []


async def test_every_token_of_a_rate_key_is_a_start_while_slots_wait(
    store: JobStore, open_session: Opener
) -> None:
    # Jobs due every second behind 6 starts per 10 s: a slot that waited for its key is
    # let in late, and runs (its catch-up comes after its run); it used to be skipped as
    # missed, its token spent on no start, and the key let in almost nothing.
    specs = keyed("call", 8, "@every 1s", uses="api")
    n1 = await node_over(store, open_session, specs, api={"rate": "6/10s"})
    starts: list[int] = []
    for t in range(1, 61):
        for job in (await n1.claim([SHARD], 10, 30.0, now=at(t))).jobs:
            skipped = plan_at_claim(job, at(t))  # what the node decides at its claim
            if skipped is None:
                starts.append(t)
                await n1.completions.complete([completion(job, at(t))], now=at(t))
            else:
                await n1.completions.complete([skipped[0]], skipped[1], now=at(t))
    assert [starts.count(t) for t in (1, 11, 21, 31, 41, 51)] == [6] * 6, starts
    assert len(starts) == 36


async def rate_blocked_claim(n1: LockSession, t: float) -> tuple[float, float | None]:
    result = await n1.claim([SHARD], 10, 30.0, now=at(t))
    assert result.jobs == []
    due = None if result.next_due is None else (result.next_due - T0).total_seconds()
    return (result.db_now - T0).total_seconds(), due


async def test_a_claim_passed_over_by_a_rate_key_says_when_its_window_reopens(
    store: JobStore, open_session: Opener
) -> None:
    specs = keyed("call", 3, "@every 1h", uses="api")
    n1 = await node_over(store, open_session, specs, api={"rate": "2/min"})
    first = await n1.claim([SHARD], 1, 30.0, now=at(3600))
    second = await n1.claim([SHARD], 1, 30.0, now=at(3620))
    assert len(first.jobs) == len(second.jobs) == 1
    # The third waits until the first start leaves the window: a minute after it. The
    # claim says so, as it says when its next job falls due.
    assert await rate_blocked_claim(n1, 3630) == (3630, 3660)
    assert await rate_blocked_claim(n1, 3659) == (3659, 3660)
    (third,) = (await n1.claim([SHARD], 1, 30.0, now=at(3660))).jobs
    assert third.slot == at(3600) and third.due == T0 + timedelta(seconds=3600)


async def one_runs_one_waits(
    store: JobStore, open_session: Opener
) -> tuple[LockSession, ClaimedJob, str]:
    """Two jobs due at 00:01 sharing a key of one run at a time: the node, the claimed run
    holding the key, and the name of the job whose slot waits for it."""
    specs = keyed("job", 2, "@every 1m", uses="seats")
    n1 = await node_over(store, open_session, specs, seats={"max_concurrent": 1})
    (holder,) = (await n1.claim([SHARD], 5, 600.0, now=at(61))).jobs
    return n1, holder, "job-01" if holder.name == "job-00" else "job-00"


# An operator's action that moves a waiting job past its slot, or off the key.
MOVES = {
    "pause": lambda store, name: store.pause(name, now=at(70)),
    "pause-until": lambda store, name: store.holds.pause_until(
        name, "default", at(200), now=at(70)
    ),
    "skip-next": lambda store, name: store.holds.skip_next(name, "default", 1, now=at(70)),
    "new-timing": lambda store, name: store.definitions.apply(
        [JobSpec.build(name, "@every 2m", HANDLER, uses="seats")], now=at(70)
    ),
    "without-the-key": lambda store, name: store.definitions.apply(
        [JobSpec.build(name, "@every 1m", HANDLER)], now=at(70)
    ),
}


@pytest.mark.parametrize("move", sorted(MOVES))
async def test_a_wait_ends_when_its_slot_stops_waiting(
    store: JobStore, open_session: Opener, move: str
) -> None:
    # One job's slot waits for the key the other's run holds. Moved on by an operator
    # instead of let in, its wait stayed open: `pulse limits list` listed it among the
    # key's waiters for ever, and no pruning took it (its job lives).
    n1, holder, name = await one_runs_one_waits(store, open_session)
    waiter = await store.get(name)
    assert [w["job"] for w in (await store.limits.get("seats")).waiters] == [waiter.name]
    await MOVES[move](store, waiter.name)
    assert (await store.limits.get("seats")).waiters == []
    assert await store.limits.waiting(waiter.id) is None
    ended = "SELECT slot, ended FROM limit_waits WHERE job_id = %s"
    rows = await (await store.db.conn.execute(ended, (waiter.id,))).fetchall()
    assert [(r["slot"], r["ended"] is not None) for r in rows] == [(at(60), True)]
    # The holder's run ends; the next claim finds nothing waiting but what is due.
    await n1.completions.complete([completion(holder, at(75))], now=at(75))
    assert (await store.limits.get("seats")).waiters == []


async def test_a_queued_slot_dropped_with_its_backfill_ends_its_wait(
    store: JobStore, open_session: Opener, settings: ClusterSettings
) -> None:
    n1, _, waiter = await one_runs_one_waits(store, open_session)
    plan = await store.runcontrol.backfill(waiter, "default", start=T0, end=at(60), now=at(62))
    async with SideConnection(settings, "n1/backfill", statement_timeout_s=5).using() as side:
        assert await backfills.fill(side, [SHARD], at(62)) == 1
    assert await n1.flights.claim([SHARD], 5, 600.0, now=at(63)) == []
    slots = {w["slot"] for w in (await store.limits.get("seats")).waiters}
    assert slots == {T0.isoformat(), at(60).isoformat()}  # the flight's, the job's own
    await store.runcontrol.cancel_backfill(plan.backfill.id)
    # The flight's wait ends; the job's own slot waits still.
    waiters = (await store.limits.get("seats")).waiters
    assert [(w["job"], w["slot"]) for w in waiters] == [(waiter, at(60).isoformat())]


async def test_a_retry_passed_over_for_its_key_waits_again(
    store: JobStore, open_session: Opener
) -> None:
    """A slot waited for its key once, ran, and failed; its retry, due while another run
    held the key, was passed over without a wait: the slot's wait had ended, and the claim
    records one wait per slot (``ON CONFLICT DO NOTHING``), so neither ``pulse limits
    list`` nor ``pulse jobs show`` said it waited, and the checker of the model test found
    it left due. The retry waits again from its pass, in a wait of its own: the first is
    kept as it was (opening it again overwrote it), and the audit reports both."""
    specs = keyed("r", 2, "@every 1m", uses="one", retries=1)
    n1 = await node_over(store, open_session, specs, one={"max_concurrent": 1})
    (first,) = (await n1.claim([SHARD], 10, 30.0, now=at(60))).jobs
    await n1.completions.complete([completion(first, at(61))], now=at(61))
    (waited,) = (await n1.claim([SHARD], 10, 30.0, now=at(62))).jobs
    assert waited.name != first.name
    retry = finish(waited, "failed", error="boom", retry_at=at(125))
    await n1.completions.complete([retry], now=at(63))
    (holder,) = (await n1.claim([SHARD], 10, 30.0, now=at(120))).jobs
    assert holder.name == first.name
    assert (await n1.claim([SHARD], 10, 30.0, now=at(126))).jobs == []
    (key,) = await store.limits.keys()
    assert [(w["job"], w["slot"]) for w in key.waiters] == [(waited.name, at(60).isoformat())]
    assert (await store.details(waited.name))["key_wait"] is not None
    # Let in once the key is free: each wait is kept, the first as it was.
    await n1.completions.complete([completion(holder, at(127))], now=at(127))
    (retried,) = (await n1.claim([SHARD], 10, 30.0, now=at(128))).jobs
    assert (retried.name, retried.attempt) == (waited.name, 2)
    await n1.completions.complete([completion(retried, at(129))], now=at(129))
    waits = await store.db.conn.execute(
        "SELECT w.since, w.ended FROM limit_waits w JOIN jobs j ON j.id = w.job_id"
        " WHERE j.name = %s ORDER BY w.since",
        (waited.name,),
    )
    assert [(w["since"], w["ended"]) for w in await waits.fetchall()] == [
        (at(60), at(62)),
        (at(126), at(128)),
    ]
    await store.db.conn.execute("UPDATE job_revisions SET at = %s", (T0,))
    scope = Scope(T0, at(61), grace_s=0.0, now=at(130))
    lines = {line.job: line async for line in audit_lines(store.db.conn, scope)}
    assert lines[waited.name].verdict == "reran"  # its retry
    assert "waited 2s for key one, then 2s for key one" in lines[waited.name].detail
