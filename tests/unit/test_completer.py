"""The completer's wait while the claim loop catches up: completions are held back (never
longer than ``MAX_DEFER_S`` or past a full batch) and written in one statement when the
claim loop has caught up or the node stops."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime
from uuid import UUID

import pytest

from cluster.store.records import ClaimedJob, Completion, Skip
from node import completer as completer_module
from node.clock import DbClock
from node.completer import Completer
from node.handlers import Outcome
from node.outcomes import after_run
from node.stats import Stats
from tests.unit.test_executor import job


class Sink:
    """Records each ``complete`` statement's batch (pure unit test: no database)."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.wrote = asyncio.Event()

    async def complete(
        self, done: Sequence[Completion], skips: Sequence[Skip] = (), now: datetime | None = None
    ) -> set[UUID]:
        self.batches.append(sorted(str(d.id) for d in done))
        self.wrote.set()
        return {d.id for d in done}


def finished(name: str) -> tuple[ClaimedJob, Completion, list[Skip]]:
    claimed = job("cluster.chaos.witness:record", name)
    done, skips = after_run(claimed, Outcome("succeeded", None, 0.01), claimed.slot)
    return claimed, done, skips


def running(
    monkeypatch: pytest.MonkeyPatch, max_defer_s: float
) -> tuple[Completer, Sink, asyncio.Event, asyncio.Task[None]]:
    """A completer whose writes are deferred, three completions queued, its loop running."""
    monkeypatch.setattr(completer_module, "MAX_DEFER_S", max_defer_s)
    sink = Sink()
    completer = Completer(sink, DbClock(), Stats(), asyncio.Event())
    completer.defer_writes(True)
    for i in range(3):
        completer.submit(*finished(f"j{i}"))
    stop = asyncio.Event()
    return completer, sink, stop, asyncio.create_task(completer.run(stop))


async def settle() -> None:
    """Let every ready task run until it blocks (no time passes)."""
    for _ in range(20):
        await asyncio.sleep(0)


async def test_completions_wait_while_deferred_and_go_in_one_batch_when_undeferred(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    completer, sink, stop, task = running(monkeypatch, 60.0)
    await settle()
    assert sink.batches == [] and completer.pending == 3
    completer.defer_writes(False)
    async with asyncio.timeout(10):
        await sink.wrote.wait()
    assert [len(b) for b in sink.batches] == [3] and completer.pending == 0
    stop.set()
    await task


async def test_a_deferred_completion_waits_no_longer_than_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, sink, stop, task = running(monkeypatch, 0.05)
    async with asyncio.timeout(10):
        await sink.wrote.wait()
    assert [len(b) for b in sink.batches] == [3]
    stop.set()
    await task


async def test_a_full_batch_or_a_stop_is_written_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(completer_module, "MAX_BATCH", 3)
    completer, sink, stop, task = running(monkeypatch, 60.0)
    async with asyncio.timeout(10):
        await sink.wrote.wait()
    assert [len(b) for b in sink.batches] == [3]

    sink.wrote.clear()
    completer.submit(*finished("last"))
    await settle()
    assert len(sink.batches) == 1, "one completion alone waits"
    stop.set()
    async with asyncio.timeout(10):
        await task
    assert [len(b) for b in sink.batches] == [3, 1] and completer.pending == 0


async def test_completions_wait_for_runs_claimed_ahead_and_go_in_one_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Jobs due one after another, claimed in a batch: while runs claimed ahead have yet to
    start, finished ones wait for them; with none coming, each is written at once."""
    monkeypatch.setattr(completer_module, "MAX_DEFER_S", 60.0)
    sink = Sink()
    completer = Completer(sink, DbClock(), Stats(), asyncio.Event())
    coming = True
    completer.more_coming = lambda: coming
    stop = asyncio.Event()
    task = asyncio.create_task(completer.run(stop))
    completer.submit(*finished("first"))
    await settle()
    completer.submit(*finished("second"))
    await settle()
    assert sink.batches == [] and completer.pending == 2
    # In a node the wait ends at MAX_DEFER_S; here the claim loop's signal ends it sooner.
    coming = False
    completer.defer_writes(False)
    async with asyncio.timeout(10):
        await sink.wrote.wait()
    assert [len(b) for b in sink.batches] == [2]

    sink.wrote.clear()
    completer.submit(*finished("alone"))
    async with asyncio.timeout(10):
        await sink.wrote.wait()
    assert [len(b) for b in sink.batches] == [2, 1]

    # Runs coming forever: the wait still ends at the bound.
    monkeypatch.setattr(completer_module, "MAX_DEFER_S", 0.05)
    coming = True
    sink.wrote.clear()
    completer.submit(*finished("bounded"))
    async with asyncio.timeout(10):
        await sink.wrote.wait()
    assert [len(b) for b in sink.batches] == [2, 1, 1]
    stop.set()
    await task
