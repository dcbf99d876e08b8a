"""What the failover tests share: a high-availability server set (skipped, saying why, when
its packages are missing and cannot be installed here), a fleet whose jobs fire every
second with catch-up ``backfill`` (so every slot must run) on a cluster whose URL names
that set, and the check that every slot of a window ran, once."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import TypeVar

import pytest

from cluster.chaos.servers.packages import PackagesMissing
from cluster.chaos.servers.serverset import ServerSet
from cluster.chaos.witness import Execution
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from tests.helpers.fleet import Fleet, doubles, every_slots
from tests.helpers.waiting import until

SHARDS = 16
S = TypeVar("S", bound=ServerSet)


@contextlib.contextmanager
def started(make: Callable[[Path], S], workdir: Path, packages: str) -> Iterator[S]:
    """``make(workdir)``, started and closed at the end; the test skipped when ``packages``
    are missing and cannot be installed."""
    try:
        servers = make(workdir)
    except PackagesMissing as exc:
        pytest.skip(f"{packages} is not available: {exc}")
    with servers:
        yield servers


@contextlib.contextmanager
def ticking_fleet(settings: ClusterSettings, workdir: Path, jobs: list[str]) -> Iterator[Fleet]:
    """A fresh cluster of ``SHARDS`` shards with ``jobs`` firing every second (the witness
    handler), and a fleet on it whose nodes are killed at the end."""
    specs = [
        JobSpec.build(name, "@every 1s", "cluster.chaos.witness:record", catch_up="backfill")
        for name in jobs
    ]

    async def init() -> None:
        async with JobStore.open(settings) as store:
            await store.init(shards=SHARDS)
            await store.definitions.apply(specs)

    asyncio.run(init())
    nodes = Fleet(settings, workdir)
    try:
        yield nodes
    finally:
        nodes.close()


def db_now(fleet: Fleet) -> datetime:
    value: datetime = fleet.sql("SELECT now() AS t")[0]["t"]
    return value


def ran_since(fleet: Fleet, jobs: list[str], since: float) -> bool:
    """Every job has run a slot that started after ``since`` (epoch seconds)."""
    fleet.check_alive()
    return {e.job for e in fleet.executions() if e.at > since} == set(jobs)


def every_slot_ran_once(
    fleet: Fleet,
    jobs: list[str],
    start: datetime,
    lost: Callable[[], Iterable[tuple[float, float]]] = list,
) -> tuple[datetime, set[tuple[str, datetime]], list[Execution]]:
    """Wait until every (job, slot) from ``start`` to now (database time) has run, then
    stop the nodes: each must exit cleanly, and no slot may have run twice. Returns (the
    window's end, its (job, slot) pairs, every execution).

    ``lost`` gives the spans (epoch seconds) in which the database acknowledged commits it
    lost afterwards (a failover to a standby that was out of the write quorum): a slot whose
    first run started in one may run again, since its claim or its completion is gone, and
    is left out of the returned executions and pairs. Any other double fails."""
    end = db_now(fleet)
    expected = {(job, slot) for job in jobs for slot in every_slots(1, start, end)}

    def all_ran() -> bool:
        fleet.check_alive()
        return expected <= {(e.job, e.slot) for e in fleet.executions()}

    until(all_ran, "every slot of the window to have run", 30)
    assert fleet.stop_all() == {node.name: 0 for node in fleet.started}, fleet.logs()
    executions = fleet.executions()
    spans = list(lost())
    first: dict[tuple[str, datetime], float] = {}
    for e in sorted(executions, key=lambda e: e.at):
        first.setdefault((e.job, e.slot), e.at)

    def in_lost(job: str, slot: datetime) -> bool:
        # Its claim committed a moment before the handler started.
        return any(began - 1.0 <= first[job, slot] <= ended for began, ended in spans)

    rerun = {(job, slot) for job, slot, _ in doubles(executions) if in_lost(job, slot)}
    if rerun:
        print(f"{len(rerun)} slots ran again after the database lost their writes: {spans}")
    kept = [e for e in executions if (e.job, e.slot) not in rerun]
    assert doubles(kept) == []
    return end, expected - rerun, kept
