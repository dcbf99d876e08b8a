"""The common ground of the every-node tests (docs/design/each-node.md): an every-node job,
a slot fanned out by a claim, and the member rows and the slot's run row as they are."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from cluster.jobs.spec import JobSpec
from cluster.store.jobstore.store import JobStore
from cluster.store.lock.records import ClaimedJob
from cluster.store.lock.session import LockSession
from tests.helpers.flights import HANDLER, handed
from tests.helpers.sessions import ALL, T0, at

MEMBERS = [("node-a", "z"), ("node-b", "z"), ("node-c", "z")]


async def every_node(store: JobStore, **options: Any) -> None:
    spec = JobSpec.build("sweep", "@every 10s", HANDLER, each_node=True, **options)
    await store.definitions.apply([spec], now=T0)


async def fan_out(
    a: LockSession, t: float, members: list[tuple[str, str | None]], shards: list[int] = ALL
) -> tuple[ClaimedJob, bool]:
    (job,) = (await a.claim(shards, 10, 30.0, now=at(t))).jobs
    assert job.each_node and not job.flight
    moved = await a.completions.spawn(
        [handed(job, at(t + 10))], [], 30.0, now=at(t), members=members
    )
    return job._replace(flight=True), moved[job.id]


async def node_runs(store: JobStore) -> list[tuple[str, str, int]]:
    cur = await store.db.conn.execute(
        "SELECT member, status, attempt FROM node_runs ORDER BY member"
    )
    return [(r["member"], r["status"], r["attempt"]) for r in await cur.fetchall()]


async def slot_row(store: JobStore, slot: datetime) -> tuple[str, str | None, dict[str, Any]]:
    (run,) = [r for r in await store.runs(job="sweep", limit=100) if r.scheduled_for == slot]
    full = await store.run("sweep", slot=slot)
    return run.status, run.last_error, (full.output or {}).get("coverage", {})
