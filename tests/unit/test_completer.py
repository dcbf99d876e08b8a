"""The completer's wait while more runs are about to finish (the claim loop catches up, or
runs claimed ahead have yet to start): completions are held back (never longer than
``MAX_DEFER_S`` or past a full batch) and written in one statement when the claim loop has
caught up or the node stops."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime
from uuid import UUID

import pytest

from cluster.store.lock.records import ClaimedJob, Completion, Skip
from node.handlers.context import Outcome
from node.pipeline import completer as completer_module
from node.pipeline.clock import DbClock
from node.pipeline.completer import Completer
from node.pipeline.outcomes import after_run
from node.pipeline.pacing import Pacing
from node.stats import Stats
from tests.helpers.claimed import job


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


def completer_on(sink: Sink) -> tuple[Completer, Pacing]:
    clock = DbClock()
    pacing = Pacing(clock)
    return Completer(sink, clock, Stats(), asyncio.Event(), pacing), pacing


def running(
    monkeypatch: pytest.MonkeyPatch, max_defer_s: float
) -> tuple[Completer, Pacing, Sink, asyncio.Event, asyncio.Task[None]]:
    """A completer while the claim loop catches up, three completions queued, its loop
    running."""
    monkeypatch.setattr(completer_module, "MAX_DEFER_S", max_defer_s)
    sink = Sink()
    completer, pacing = completer_on(sink)
    pacing.set_catching_up(True)
    for i in range(3):
        completer.submit(*finished(f"j{i}"))
    stop = asyncio.Event()
    return completer, pacing, sink, stop, asyncio.create_task(completer.run(stop))


async def settle() -> None:
    """Let every ready task run until it blocks (no time passes)."""
    for _ in range(20):
        await asyncio.sleep(0)


async def test_completions_wait_while_deferred_and_go_in_one_batch_when_undeferred(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    completer, pacing, sink, stop, task = running(monkeypatch, 60.0)
    await settle()
    assert sink.batches == [] and completer.pending == 3
    pacing.set_catching_up(False)
    async with asyncio.timeout(10):
        await sink.wrote.wait()
    assert [len(b) for b in sink.batches] == [3] and completer.pending == 0
    stop.set()
    await task


async def test_a_deferred_completion_waits_no_longer_than_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, _, sink, stop, task = running(monkeypatch, 0.05)
    async with asyncio.timeout(10):
        await sink.wrote.wait()
    assert [len(b) for b in sink.batches] == [3]
    stop.set()
    await task


async def test_a_full_batch_or_a_stop_is_written_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(completer_module, "MAX_BATCH", 3)
    completer, _, sink, stop, task = running(monkeypatch, 60.0)
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
    start, finished ones wait for them (at most ``MAX_DEFER_S``)."""
    monkeypatch.setattr(completer_module, "MAX_DEFER_S", 60.0)
    sink = Sink()
    completer, pacing = completer_on(sink)
    pacing.claimed_ahead(3600.0)
    stop = asyncio.Event()
    task = asyncio.create_task(completer.run(stop))
    completer.submit(*finished("first"))
    await settle()
    completer.submit(*finished("second"))
    await settle()
    assert sink.batches == [] and completer.pending == 2
    # In a node the wait ends at MAX_DEFER_S; here the claim loop's signal ends it sooner.
    pacing.set_catching_up(True)
    pacing.set_catching_up(False)
    async with asyncio.timeout(10):
        await sink.wrote.wait()
    assert [len(b) for b in sink.batches] == [2]

    # Runs coming for an hour yet: the wait still ends at the bound.
    monkeypatch.setattr(completer_module, "MAX_DEFER_S", 0.05)
    sink.wrote.clear()
    completer.submit(*finished("bounded"))
    async with asyncio.timeout(10):
        await sink.wrote.wait()
    assert [len(b) for b in sink.batches] == [2, 1]
    stop.set()
    await task


async def test_with_no_more_runs_coming_each_completion_is_written_at_once() -> None:
    sink = Sink()
    completer, pacing = completer_on(sink)
    pacing.claimed_ahead(0.0)  # started already
    stop = asyncio.Event()
    task = asyncio.create_task(completer.run(stop))
    for count, name in enumerate(["alone", "again"], start=1):
        sink.wrote.clear()
        completer.submit(*finished(name))
        async with asyncio.timeout(10):
            await sink.wrote.wait()
        assert [len(b) for b in sink.batches] == [1] * count
    stop.set()
    await task
