"""The claim loop on real Postgres: it sleeps until the next due slot, including the slots
its own completions write (the claim that planned the sleep saw those jobs running)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from cluster.jobs import JobStore
from cluster.jobspec import JobSpec
from cluster.session import LockSession
from cluster.settings import ClusterSettings
from node.claimer import Claimer
from node.clock import DbClock
from node.completer import Completer
from node.executor import Executor
from node.state import NodeState
from node.stats import Stats

ALL = frozenset(range(16))


async def test_claim_loop_wakes_for_the_slot_its_completion_wrote(
    store: JobStore, settings: ClusterSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    witness = tmp_path / "witness.jsonl"
    monkeypatch.setenv("PULSE_WITNESS_FILE", str(witness))
    await store.add(JobSpec.build("tick", "@every 1s", "tests.witness:record"))
    session = LockSession(settings, "n1", "z", session_timeout_s=10, statement_timeout_s=5)
    await session.open()
    assert await session.try_lock(sorted(ALL)) == ALL
    state = NodeState("n1", "z", 16, held=ALL)
    stats, clock = Stats(), DbClock()
    completer = Completer(session, clock, stats, state.wake)
    executor = Executor(4, "n1", "z", completer.run_done)
    # A poll interval far longer than the test: only the completions can say when the one
    # job is due next (it is running whenever the claim looks).
    claimer = Claimer(
        state, session, executor, completer, clock, stats,
        poll_interval_s=60.0, lease_s=30.0, trust_margin_s=2.0,
    )  # fmt: skip
    completer.on_next = claimer.due_at
    stop = asyncio.Event()
    tasks = [asyncio.create_task(claimer.run(stop)), asyncio.create_task(completer.run(stop))]

    def slots() -> list[str]:
        if not witness.exists():
            return []
        return [json.loads(line)["slot"] for line in witness.read_text().splitlines()]

    try:
        deadline = time.monotonic() + 20
        while len(slots()) < 4:
            assert time.monotonic() < deadline, f"ran only {slots()} (claims: {stats.claims})"
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 10)
        executor.shutdown()
        await session.close()
    ran = slots()
    assert len(ran) == len(set(ran))  # consecutive slots, each once
    assert stats.outcomes["succeeded"] >= 4
