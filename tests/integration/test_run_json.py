"""A page of runs written as JSON by its statement (``cluster/jobs/sqljson.py``) says what
``Run.to_json`` says of each run (``pulse runs --json``): the same keys in the same order,
the same values of the same JSON types (a duration stays ``2.0``), the same nulls; an
attempt in flight is listed ``running``; keyset pages go on from their cursor and keep to
the token's tenant."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from cluster.jobs.spec import JobSpec
from cluster.store.jobstore.pages import Pages
from cluster.store.jobstore.store import JobStore
from tests.helpers.everynode import MEMBERS, every_node, fan_out
from tests.helpers.sessions import ALL, T0, Opener

# (job, tenant, slot offset s, attempt, node, zone, status, start, end, duration, error, origin)
RUNS: list[tuple[Any, ...]] = [
    ("a", "default", 0, 1, "n1", "z1", "succeeded", 0.0, 2.0, 2.0, None, "schedule"),
    ("a", "default", 60, 2, "n2", None, "failed", 60.25, 61.75, 1.5, 'boom "x"\né', "backfill"),
    ("a", "default", 120, 1, None, None, "skipped", None, None, None, "missed by 3s", "schedule"),
    ("b", "acme", 0, 3, "n3", "z2", "timed_out", 0.000001, 10.0, 9.999999, "timeout", "rerun"),
    ("b", "acme", 60, 1, "n1", "z1", "lost", 60.0, None, None, None, "trigger"),
    ("b", "acme", 180, 1, "n1", "z1", "succeeded", 180.5, 180.5, 0.0, None, "schedule"),
]


def _canonical(value: Any) -> str:
    """One text for a JSON value: key order, and int against float, are kept."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


async def _runs(store: JobStore) -> None:
    specs = [
        JobSpec.build("a", "@every 1m", "x.y:z"),
        JobSpec.build("b", "@every 1m", "x.y:z", tenant="acme"),
    ]
    await store.definitions.apply(specs, now=T0)
    for job, tenant, slot, attempt, node, zone, status, start, end, took, error, origin in RUNS:
        at = [None if s is None else T0 + timedelta(seconds=s) for s in (slot, start, end)]
        await store.db.conn.execute(
            "INSERT INTO runs (job_id, tenant_id, job_name, scheduled_for, attempt, node_id,"
            " zone, status, started_at, finished_at, duration_s, last_error, origin)"
            " SELECT id, tenant_id, name, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s FROM jobs"
            " WHERE name = %s AND tenant_id = %s",
            (at[0], attempt, node, zone, status, at[1], at[2], took, error, origin, job, tenant),
        )


async def test_a_page_written_by_sql_says_what_the_model_says(store: JobStore) -> None:
    await _runs(store)
    page = await store.pages.runs(limit=500)
    written = json.loads(page.runs)
    models = [r.to_json() for r in await store.runs(limit=500)]
    assert page.count == len(written) == len(RUNS)
    assert [_canonical(r) for r in written] == [_canonical(r) for r in models]
    assert {r["duration_s"] for r in written} >= {2.0, 0.0, None}
    assert '"duration_s":2.0' in _canonical(written)  # a float, as Python writes it


async def test_an_attempt_in_flight_is_listed_running(
    store: JobStore, open_session: Opener
) -> None:
    await _runs(store)
    session = await open_session("n9")
    await session.try_lock(range(await store.shard_count()))
    (claimed,) = (await session.claim(
        range(await store.shard_count()), 1, 30.0, now=T0 + timedelta(hours=1)
    )).jobs  # fmt: skip
    page = await store.pages.runs(job=claimed.name, tenant=claimed.tenant, limit=500)
    written = json.loads(page.runs)
    models = [r.to_json() for r in await store.runs(claimed.name, claimed.tenant, limit=500)]
    assert [_canonical(r) for r in written] == [_canonical(r) for r in models]
    (running,) = [r for r in written if r["status"] == "running"]
    assert running["node_id"] == "n9" and running["finished_at"] is None


async def test_pages_go_on_from_their_cursor_and_keep_to_the_scope(store: JobStore) -> None:
    await _runs(store)
    seen: list[dict[str, Any]] = []
    before = None
    while True:
        page = await store.pages.runs(before=before, limit=2)
        seen += json.loads(page.runs)
        if page.count < 2 or page.last is None:
            break
        before = page.last
    everything = json.loads((await store.pages.runs(limit=500)).runs)
    assert [_canonical(r) for r in seen] == [_canonical(r) for r in everything]
    scoped = json.loads((await Pages(store.db.conn, "acme").runs(limit=500)).runs)
    assert {r["tenant"] for r in scoped} == {"acme"} and len(scoped) == 3
    assert json.loads((await Pages(store.db.conn, "nobody").runs()).runs) == []


async def test_an_open_every_node_slot_is_listed_as_pulse_runs_lists_it(
    store: JobStore, open_session: Opener
) -> None:
    """An every-node slot open on its members is ``running``, its coverage so far as the
    error, on the API's page as in ``pulse runs``."""
    await every_node(store)
    session = await open_session("node-a")
    await session.try_lock(ALL)
    await fan_out(session, 10, MEMBERS)
    written = json.loads((await store.pages.runs(limit=500)).runs)
    models = [r.to_json() for r in await store.runs(limit=500)]
    assert [_canonical(r) for r in written] == [_canonical(r) for r in models]
    (slot,) = written
    assert slot["status"] == "running" and slot["error"].startswith("0/3")
