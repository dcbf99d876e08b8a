"""The claim loop on real Postgres: it sleeps until the next due slot, including the slots
its own completions write (the claim that planned the sleep saw those jobs running), takes
jobs due one after another in batches, and, with more due than it can run, takes them
across tenants in turn."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.connect import connect
from cluster.store.jobstore.store import JobStore
from cluster.store.lock.session import LockSession
from node.pipeline.claimer import CLAIM_BATCH_S, Claimer
from node.pipeline.clock import DbClock
from node.pipeline.completer import Completer
from node.pipeline.executor import Executor
from node.pipeline.listener import WakeListener
from node.pipeline.pacing import Pacing
from node.state import NodeState
from node.stats import Stats
from tests.helpers.outbox import sql
from tests.helpers.waiting import until

ALL = frozenset(range(16))


@dataclass
class Loop:
    stats: Stats
    witness: Path

    def records(self) -> list[dict[str, str]]:
        if not self.witness.exists():
            return []
        return [json.loads(line) for line in self.witness.read_text().splitlines()]

    def slots(self) -> list[str]:
        return [r["slot"] for r in self.records()]

    async def wait_for_runs(self, n: int, timeout_s: float = 20.0) -> None:
        try:
            await until(lambda: len(self.slots()) >= n, f"{n} runs", timeout_s, interval_s=0.05)
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}: ran {self.slots()} ({self.stats.claims} claims)"
            ) from None


@pytest.fixture
def witness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file the witness handler of this test's runs writes to."""
    path = tmp_path / "witness.jsonl"
    monkeypatch.setenv("PULSE_WITNESS_FILE", str(path))
    return path


@contextlib.asynccontextmanager
async def claim_loop(
    settings: ClusterSettings,
    witness: Path,
    concurrency: int = 64,
    fairness: bool = True,
    listen: bool = False,
) -> AsyncIterator[Loop]:
    """One node's claim loop, completer and executor over every shard. The poll interval
    is far longer than a test: only due times wake the loop, and with ``listen`` the
    node's NOTIFY listener (a place a tenant at its limit got back, say)."""
    session = LockSession(settings, "n1", "z", session_timeout_s=10, statement_timeout_s=5)
    await session.open()
    assert await session.try_lock(sorted(ALL)) == ALL
    state = NodeState("n1", "z", 16, held=ALL)
    stats, clock = Stats(), DbClock()
    pacing = Pacing(clock)
    completer = Completer(session.completions, clock, stats, state.wake, pacing)
    executor = Executor(concurrency, "n1", "z", completer.run_done)
    claimer = Claimer(
        state, session, executor, completer, clock, stats, pacing,
        poll_interval_s=60.0, lease_s=30.0, trust_margin_s=2.0, fairness=fairness,
    )  # fmt: skip
    stop = asyncio.Event()
    tasks = [asyncio.create_task(WakeListener(settings, state, stop).run_once())] if listen else []
    if listen:
        await _listening(settings, state)
    tasks += [asyncio.create_task(claimer.run(stop)), asyncio.create_task(completer.run(stop))]
    try:
        yield Loop(stats, witness)
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 10)
        executor.shutdown()
        await session.close()


async def _listening(settings: ClusterSettings, state: NodeState) -> None:
    """Until the listener hears a NOTIFY of a held shard (its LISTEN may not have run yet)."""

    async def heard() -> bool:
        await sql(settings, "SELECT pg_notify(%s, '0')", (settings.wake_channel,))
        return state.wake.is_set()

    await until(heard, "the listener to listen", interval_s=0.1)
    state.wake.clear()


async def test_claim_loop_wakes_for_the_slot_its_completion_wrote(
    store: JobStore, settings: ClusterSettings, witness: Path
) -> None:
    # The one job is running whenever the claim looks: only its completions can say when
    # it is due next.
    await store.definitions.add(JobSpec.build("tick", "@every 1s", "cluster.chaos.witness:record"))
    async with claim_loop(settings, witness) as loop:
        await loop.wait_for_runs(4)
    ran = loop.slots()
    assert len(ran) == len(set(ran))  # consecutive slots, each once
    assert loop.stats.outcomes["succeeded"] >= 4


async def test_jobs_due_one_after_another_are_claimed_in_batches(
    store: JobStore, settings: ClusterSettings, witness: Path
) -> None:
    n, apart_s = 40, 0.01
    for i in range(n):
        await store.definitions.add(
            JobSpec.build(f"spread-{i:02d}", "@every 1h", "cluster.chaos.witness:record")
        )
    # Due 10 ms apart from two seconds on, in the order of their names.
    conn = await connect(settings, "setup")
    try:
        await conn.execute(
            "UPDATE jobs SET next_run_at = t, slot_at = t"
            " FROM (SELECT id, now() + make_interval(secs => 2 + %(apart)s"
            "       * substr(name, 8)::int) AS t FROM jobs) AS d WHERE jobs.id = d.id",
            {"apart": apart_s},
        )
    finally:
        await conn.close()
    async with claim_loop(settings, witness) as loop:
        await loop.wait_for_runs(n)
    assert sorted(loop.slots()) == sorted(set(loop.slots()))  # each slot once
    # A claim takes what falls due within CLAIM_BATCH_S (0.1 s) of the job it woke for:
    # the 0.39 s of slots come in about four claims (plus the first, before any was due),
    # where a claim per job would be forty. Slower wake-ups only make batches bigger.
    assert CLAIM_BATCH_S >= 0.1
    assert loop.stats.claims <= 10, loop.stats.claims


async def test_with_more_due_than_it_runs_the_loop_takes_the_tenants_in_turn(
    store: JobStore, settings: ClusterSettings, witness: Path
) -> None:
    # All due at the same moment: 40 jobs of one tenant, created first (so first among
    # equals in the due index), then 3 of another; 4 execution slots.
    await all_due(store, settings, {"big": 40, "small": 3})
    async with claim_loop(settings, witness, concurrency=4) as loop:
        await loop.wait_for_runs(24)
    # The first claim is full, so the next ones are fair: the small tenant gets a turn in
    # each (in a claim of one slot, the tenants' tied turns go by lot), and all of its jobs
    # start among the first 24 of 43 (oldest first: among the last 3).
    first = [r["tenant"] for r in loop.records()[:24]]
    assert first.count("small") == 3, first


async def all_due(store: JobStore, settings: ClusterSettings, counts: dict[str, int]) -> None:
    """``counts`` jobs per tenant, made in that order and all due now (50 ms runs)."""
    for tenant, count in counts.items():
        for i in range(count):
            spec = JobSpec.build(
                f"{tenant}-{i:02d}", "@every 1h", "cluster.chaos.witness:record",
                tenant=tenant, payload={"sleep_s": 0.05},
            )  # fmt: skip
            await store.definitions.add(spec)
    conn = await connect(settings, "setup")
    try:
        await conn.execute("UPDATE jobs SET next_run_at = now(), slot_at = now()")
    finally:
        await conn.close()


async def test_a_tenant_at_its_limit_holds_back_no_other_even_without_fairness(
    store: JobStore, settings: ClusterSettings, witness: Path
) -> None:
    await all_due(store, settings, {"big": 40, "small": 3})
    await store.tenants.set_limit("big", 2)
    async with claim_loop(settings, witness, concurrency=8, fairness=False, listen=True) as loop:
        await loop.wait_for_runs(9)
    # Oldest first, the first claim finds only the big tenant's jobs, takes its 2 places
    # and passes the rest over; the next claim reads across tenants.
    first = [r["tenant"] for r in loop.records()[:5]]
    assert first.count("small") == 3, first
