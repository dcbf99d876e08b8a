"""Named limits on real nodes (docs/limits.md, docs/design/limits.md): two keys shared by
the jobs of two tenants under load are never held by more runs than their limits, counted
from the runs' start and end times in the database and from the handlers' own record of
when they started and ended, through a SIGKILL of a node holding a key (its keys come back
with the recovery of its runs); a rate key's starts never pass its rate in any window, and
reach it while jobs wait."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import pytest

from cluster.chaos.witness import Execution
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from tests.helpers.fleet import Fleet
from tests.helpers.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]
SPAN = "tests.e2e.limit_handlers:span"
LIMITS = {"wh": 2, "api": 1}


def peak(spans: Iterable[tuple[float, float]]) -> int:
    """The most intervals open at once (one that ends as another starts is not counted
    with it)."""
    found = list(spans)
    edges = sorted([(s, 1) for s, _ in found] + [(e, -1) for _, e in found])
    at_once = most = 0
    for _, step in edges:
        at_once += step
        most = max(most, at_once)
    return most


def setup(settings: ClusterSettings, specs: list[JobSpec], **keys: dict[str, Any]) -> None:
    async def go() -> None:
        async with JobStore.open(settings) as store:
            await store.init(16)
            for name, limits in keys.items():
                await store.limits.set(name, **limits)
            await store.definitions.apply(specs)

    asyncio.run(go())


def witnessed(fleet: Fleet, killed: str, killed_at: float) -> list[tuple[Execution, float]]:
    """Each handler start with its end: its own end line, or the kill of its node."""
    ends: dict[tuple[str, str, str, int, str], float] = {}
    path = fleet.witness.with_name(fleet.witness.name + ".ends")
    for line in path.read_text().splitlines() if path.exists() else []:
        row = json.loads(line)
        ends[(row["tenant"], row["job"], row["slot"], row["attempt"], row["node"])] = row["at"]
    spans = []
    for e in fleet.executions():
        end = ends.get((e.tenant, e.job, e.slot.isoformat(), e.attempt, e.node))
        if end is None:
            assert e.node == killed, f"{e} never ended"
            end = killed_at
        spans.append((e, end))
    return spans


def test_shared_keys_hold_their_limits_across_nodes_and_tenants_through_a_kill(
    settings: ClusterSettings, fleet: Fleet
) -> None:
    uses = {"wh": ["wh"], "both": ["wh", "api"], "api": ["api"]}
    plan = [("acme", "wh", 3, 0.6), ("acme", "both", 2, 0.4), ("globex", "wh", 3, 0.5),
            ("globex", "api", 2, 0.3)]  # fmt: skip
    specs = [
        JobSpec.build(f"{kind}-{i}", "@every 1s", SPAN, tenant=tenant, retries=3,
                      uses=uses[kind], payload={"sleep_s": sleep_s})
        for tenant, kind, count, sleep_s in plan
        for i in range(count)
    ]  # fmt: skip
    setup(settings, specs, wh={"max_concurrent": 2}, api={"max_concurrent": 1})
    fleet.start("n1", "a")
    fleet.start("n2", "b")

    def holder() -> str | None:
        rows = fleet.sql(
            "SELECT locked_by FROM jobs WHERE holds IS NOT NULL AND status = 'running'"
            " AND locked_by IS NOT NULL LIMIT 1"
        )
        return rows[0]["locked_by"] if rows else None

    until(lambda: len(fleet.executions()) >= 10 or None, "runs under load", 60)
    killed = until(holder, "a node holding a key", 30)
    fleet.node(killed).signal(signal.SIGKILL)
    killed_at = time.time()

    # Recovery gives the dead node's keys back: no row holds a key under it, and each
    # key's count is exactly the rows holding it.
    def recovered() -> bool:
        rows = fleet.sql(
            "SELECT count(*) AS n FROM jobs WHERE locked_by = %s AND holds IS NOT NULL",
            (killed,),
        )
        return rows[0]["n"] == 0

    until(recovered, "the killed node's keys back", 30)
    before = len(fleet.executions())
    until(lambda: len(fleet.executions()) >= before + 15 or None, "runs after the kill", 60)
    fleet.stop_all()

    # From the database: every run's start and end (the last attempt of each slot).
    runs = fleet.sql(
        "SELECT r.started_at, r.finished_at, j.uses FROM runs r JOIN jobs j ON j.id = r.job_id"
        " WHERE r.started_at IS NOT NULL AND r.finished_at IS NOT NULL"
    )
    for key, limit in LIMITS.items():
        spans = [(r["started_at"], r["finished_at"]) for r in runs if key in r["uses"]]
        assert peak((s.timestamp(), e.timestamp()) for s, e in spans) == limit, key
    # From the handlers' own clock: what ran at once, lost attempts included.
    using = {(s.tenant, s.name): s.uses for s in specs}
    spans_seen = witnessed(fleet, killed, killed_at)
    assert any(e.node == killed for e, _ in spans_seen)
    for key, limit in LIMITS.items():
        seen = [(e.at, end) for e, end in spans_seen if key in using[(e.tenant, e.job)]]
        assert peak(seen) <= limit, key
    # Every key was given back, and the slots that waited were recorded.
    rooms = fleet.sql("SELECT name, running FROM limit_room ORDER BY name")
    assert rooms == [{"name": "api", "running": 0}, {"name": "wh", "running": 0}]
    assert fleet.sql("SELECT count(*) AS n FROM limit_waits")[0]["n"] > 0


def test_a_rate_key_lets_no_more_starts_into_any_window_than_its_rate(
    settings: ClusterSettings, fleet: Fleet
) -> None:
    specs = [
        JobSpec.build(f"call-{i}", "@every 1s", SPAN, tenant=tenant, uses=["calls"])
        for i, tenant in enumerate(["acme", "globex"] * 4)
    ]
    setup(settings, specs, calls={"rate": "6/10s"})
    fleet.start("n1", "a")
    fleet.start("n2", "b")

    def starts() -> list[datetime] | None:
        rows = fleet.sql("SELECT started_at FROM runs WHERE started_at IS NOT NULL")
        return [r["started_at"] for r in rows] if len(rows) >= 14 else None

    # More starts than two windows hold: the key let some in, then held the rest back.
    until(starts, "starts past the second window", 150)
    fleet.stop_all()
    # Every attempt that took a token, those a stopping node released included.
    found = sorted(
        r["started_at"]
        for r in fleet.sql("SELECT started_at FROM runs WHERE started_at IS NOT NULL")
    )
    for first in found:  # every window of 10 s that starts at a start
        window = [s for s in found if 0 <= (s - first).total_seconds() < 10]
        assert len(window) <= 6, (first, found)
    # Jobs wait all along, so each token comes back as a start: once the start six before
    # leaves the window, within the claim loop's poll (the bound is generous: a loaded
    # machine). Slots let in late used to be skipped as missed, each wasting a token.
    gaps = [(s - found[i]).total_seconds() for i, s in enumerate(found[6:14])]
    assert max(gaps) < 20, (gaps, found)
