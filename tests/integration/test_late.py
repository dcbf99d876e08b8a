"""The late pass: a slot not started within its job's ``late_after_s`` raises one ``late``
event, found from the database by any node (it holds no shard and needs no lock session),
once per slot however many nodes run the pass at once. Explicit ``now``."""

from __future__ import annotations

import asyncio

import pytest

from cluster.settings import ClusterSettings
from cluster.store.connect import connect
from cluster.store.housekeeping.alerts import AlertStore
from cluster.store.jobstore.store import JobStore
from cluster.store.queries import query
from cluster.store.side import SideConnection
from tests.helpers.outbox import T0, add_rule, at, events, every_10s, run_slot
from tests.helpers.plans import FILL, job_scans, plan_of
from tests.helpers.sessions import Opener

pytestmark = pytest.mark.timeout(60)
HOOK = "http://127.0.0.1:9/hook"
SHARDS = 16


async def late_names(alerts: AlertStore, seconds: float) -> list[str]:
    return sorted(row["name"] for row in await alerts.late_pass(SHARDS, now=at(seconds)))


async def test_a_slot_not_started_in_time_raises_late_once(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await store.definitions.apply([every_10s("a", late_after="30s"), every_10s("quick")], now=T0)
    await store.pause("quick")  # a paused job is never late
    await add_rule(settings, "ops", HOOK, events="late")
    async with AlertStore.open(settings, "n9/alerts") as alerts:
        assert await late_names(alerts, 40) == []  # due at 10 s: 30 s is not late yet
        assert await late_names(alerts, 40.5) == ["a"]
        assert await late_names(alerts, 90) == []  # the same slot: once
        (event,) = await events(settings)
        assert (event["event"], event["slot"], event["attempt"], event["node_id"]) == (
            "late",
            at(10),
            1,
            None,
        )
        assert event["detail"] == "not started 31s after it was due (late after 30s)"
        # It runs at last: catch-up once skips 10-80 s at the claim, then runs 90 s. The
        # next slot (100 s) can be late again.
        node = await open_session("n1")
        await run_slot(node, at(95))
        await run_slot(node, at(95))
        assert (await store.get("a")).slot_at == at(100)
        assert await late_names(alerts, 120) == []
        assert await late_names(alerts, 131) == ["a"]
    assert [e["slot"] for e in await events(settings)] == [at(10), at(100)]


async def test_a_slot_started_late_is_reported_by_its_completion_once(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await store.definitions.apply([every_10s("a", late_after="5s")], now=T0)
    await add_rule(settings, "ops", HOOK, events="late,failed")
    node = await open_session("n1", "za")
    # Claimed 7 s late and failed before any late pass saw it: the completion reports both.
    await run_slot(node, at(17), "failed", "boom")
    assert [(e["event"], e["node_id"], e["detail"]) for e in await events(settings)] == [
        ("late", "n1", "started 7s after it was due (late after 5s)"),
        ("failed", "n1", None),
    ]
    async with AlertStore.open(settings, "n9/alerts") as alerts:
        assert await late_names(alerts, 19) == []
        # Slot 20 s: the pass reports it first, so its late completion raises nothing more.
        assert await late_names(alerts, 26) == ["a"]
    await run_slot(node, at(27))
    assert [(e["event"], e["slot"]) for e in await events(settings)] == [
        ("late", at(10)),
        ("failed", at(10)),
        ("late", at(20)),
    ]


async def test_nodes_running_the_pass_at_once_raise_each_late_slot_once(
    store: JobStore, settings: ClusterSettings
) -> None:
    await store.definitions.apply(
        [every_10s(f"j{i:03d}", late_after="1s") for i in range(200)], now=T0
    )
    await add_rule(settings, "ops", HOOK, events="late")
    stores = [
        AlertStore(SideConnection(settings, f"n{i}/alerts", statement_timeout_s=5))
        for i in range(4)
    ]
    try:
        found = await asyncio.gather(*(s.late_pass(SHARDS, now=at(20)) for s in stores))
        again = await asyncio.gather(*(s.late_pass(SHARDS, now=at(21)) for s in stores))
    finally:
        for s in stores:
            await s.close()
    marked = [row["name"] for rows in [*found, *again] for row in rows]
    assert sorted(marked) == sorted(f"j{i:03d}" for i in range(200))
    assert len(await events(settings)) == 200


@pytest.mark.new_schema
async def test_the_late_pass_probes_the_due_index_of_each_shard(
    store: JobStore, settings: ClusterSettings
) -> None:
    conn = await connect(settings, "n1/upkeep")
    try:
        await conn.execute(FILL, {"n": 3000, "t0": T0})
        await conn.execute("VACUUM ANALYZE jobs")
        await conn.execute(query("prune_setup"))  # as a node's upkeep connection runs it
        plan = await plan_of(conn, "late_pass", {"shards": 256, "now": at(120)})
    finally:
        await conn.close()
    scans = job_scans(plan)
    assert scans and all(i == "jobs_due" or s == "Tid Scan" for s, i in scans), scans
