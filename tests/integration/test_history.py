"""Run history against a real Postgres: a slot's run row is written when an attempt ends.

A claim writes no run row; the attempt in flight lives on its job row, and ``pulse runs``
shows it from there. Completion, release and recovery each write the row of the attempt
they end, one row per (job, slot) however many attempts it takes, and only when they
pass the lease-token fence. Database time is driven with explicit ``now=`` values.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import pytest

from cluster.health.status import collect
from cluster.jobs.models import Run
from cluster.settings import ClusterSettings
from cluster.store.connect import connect
from cluster.store.jobstore.store import JobStore
from cluster.store.lock.records import ClaimedJob, Completion, Skip
from cluster.store.queries import query
from tests.helpers.history import add, every_10s, finish, rows, run_rows
from tests.helpers.sessions import ALL, T0, Opener, at
from tests.helpers.waiting import until


async def job_row(settings: ClusterSettings, job_id: UUID) -> dict[str, Any]:
    (row,) = await rows(settings, "SELECT * FROM jobs WHERE id = %s", (job_id,))
    return row


def fields(row: dict[str, Any], *names: str) -> tuple[Any, ...]:
    return tuple(row[n] for n in names)


RUN = ("status", "attempt", "node_id", "zone", "lease_token", "started_at", "finished_at")


# -- claim and completion ------------------------------------------------------------------


async def test_a_claim_writes_no_run_row(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await add(store, every_10s("a"), every_10s("b"))
    node = await open_session("node-a", "zone-a")
    claimed = (await node.claim(ALL, 10, 30.0, now=at(10))).jobs
    assert len(claimed) == 2
    assert await run_rows(settings) == []
    for job in claimed:
        row = await job_row(settings, job.id)
        assert fields(
            row, "status", "locked_by", "locked_zone", "locked_at", "slot_at", "attempt"
        ) == ("running", "node-a", "zone-a", at(10), at(10), 1)
        assert row["lease_token"] == job.lease_token


async def test_complete_writes_the_run_row_with_the_claim_time(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await add(store, every_10s("a"), every_10s("b"))
    node = await open_session("node-a", "zone-a")
    a, b = sorted((await node.claim(ALL, 10, 30.0, now=at(10))).jobs, key=lambda j: j.name)
    error = 'RuntimeError: l\'amont a répondu « 503 » ✗\nsecond line, "quoted" \\ and \t'
    done = [finish(a, duration_s=0.125), finish(b, "failed", error=error, duration_s=None)]
    assert await node.completions.complete(done, now=at(13.5)) == {a.id, b.id}

    row_a, row_b = await run_rows(settings)
    assert fields(row_a, *RUN) == (
        "succeeded", 1, "node-a", "zone-a", a.lease_token, at(10), at(13.5)
    )  # fmt: skip
    assert (row_a["scheduled_for"], row_a["duration_s"], row_a["last_error"]) == (
        at(10),
        0.125,
        None,
    )
    assert (row_b["status"], row_b["duration_s"], row_b["last_error"]) == ("failed", None, error)
    # The job is idle at its next slot; nothing of the claim is left on it.
    job = await job_row(settings, a.id)
    assert fields(
        job, "status", "slot_at", "last_run_at", "locked_by", "locked_at", "locked_zone"
    ) == ("idle", at(20), at(10), None, None, None)
    # Through the API: the history holds the finished runs only.
    assert {(r.job_name, r.status, r.started_at) for r in await store.runs()} == {
        ("a", "succeeded", at(10)),
        ("b", "failed", at(10)),
    }


async def test_a_retry_of_the_same_slot_updates_its_one_run_row(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await add(store, every_10s("a", retries=2))
    first_node, second_node = await open_session("n1", "za"), await open_session("n2", "zb")
    (first,) = (await first_node.claim(ALL, 10, 30.0, now=at(10))).jobs
    retry = finish(first, "failed", error="boom", retry_at=at(20))
    assert await first_node.completions.complete([retry], now=at(11)) == {first.id}
    (failed,) = await run_rows(settings)
    assert fields(failed, *RUN, "last_error") == (
        "failed", 1, "n1", "za", first.lease_token, at(10), at(11), "boom"
    )  # fmt: skip

    # Attempt 2 of the same slot, on another node: the row waits for it to end...
    (second,) = (await second_node.claim(ALL, 10, 30.0, now=at(20))).jobs
    assert (second.slot, second.attempt) == (at(10), 2)
    assert await run_rows(settings) == [failed]
    # ...while the listing shows the attempt in flight in its place, with the row's id.
    (live,) = await store.runs(job="a")
    assert (live.id, live.status, live.attempt, live.node_id, live.zone) == (
        failed["id"],
        "running",
        2,
        "n2",
        "zb",
    )
    assert (live.started_at, live.finished_at, live.duration_s) == (at(20), None, None)

    assert await second_node.completions.complete([finish(second)], now=at(22)) == {second.id}
    (row,) = await run_rows(settings)
    assert row["id"] == failed["id"]
    assert fields(row, *RUN, "last_error") == (
        "succeeded", 2, "n2", "zb", second.lease_token, at(20), at(22), None
    )  # fmt: skip


async def test_a_slot_skipped_at_claim_has_no_start_and_its_skips_are_recorded(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await add(store, every_10s("a"))
    node = await open_session("n1", "za")
    (job,) = (await node.claim(ALL, 10, 30.0, now=at(45))).jobs
    skipped = Completion(
        job.id, job.lease_token, job.slot, "skipped", "missed (catch-up once)", None, at(40),
        at(40), 1,
    )  # fmt: skip
    skips = [
        Skip(job.id, at(20), "missed 20"),
        Skip(job.id, at(30), "missed 30"),
        Skip(job.id, job.slot, "the completed slot itself is not a skip"),
    ]
    assert await node.completions.complete([skipped], skips, now=at(45)) == {job.id}
    got = [
        fields(r, "scheduled_for", "status", "attempt", "started_at", "finished_at", "last_error")
        for r in await run_rows(settings)
    ]
    assert got == [
        (at(10), "skipped", 1, None, at(45), "missed (catch-up once)"),
        (at(20), "skipped", 1, None, at(45), "missed 20"),
        (at(30), "skipped", 1, None, at(45), "missed 30"),
    ]
    assert (await job_row(settings, job.id))["last_run_at"] is None


async def test_a_fenced_completion_writes_no_run_row(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    # A retry left: the lost attempt runs again (a last attempt lost: test_poison.py). Either
    # job may be the one claimed (equal due times).
    await add(store, every_10s("a", retries=1), every_10s("idle", retries=1))
    stale_node, heir = await open_session("n1", "za"), await open_session("n2", "zb")
    (stale,) = (await stale_node.claim(ALL, 1, 30.0, now=at(10))).jobs
    # Its lease expires; the heir recovers the slot (a lost row) and claims it again.
    assert len(await heir.recover(ALL, ["n1", "n2"], now=at(41))) == 1
    lost = await run_rows(settings)
    assert [r["status"] for r in lost] == ["lost"]
    fresh = next(j for j in (await heir.claim(ALL, 10, 30.0, now=at(41))).jobs if j.id == stale.id)

    # The late completion and its skips write nothing; neither does one for a job that
    # was never claimed under that token.
    other = next(j for j in await store.jobs() if j.id != stale.id)
    never = Completion(other.id, 12345, other.slot_at, "succeeded", None, 0.1, at(50), at(50), 1)
    late = [finish(stale), never]
    assert (
        await stale_node.completions.complete(late, [Skip(stale.id, at(20), "x")], now=at(45))
        == set()
    )
    assert await run_rows(settings) == lost

    assert await heir.completions.complete([finish(fresh)], now=at(46)) == {fresh.id}
    (row,) = [r for r in await run_rows(settings) if r["job_id"] == stale.id]
    assert (row["id"], row["status"], row["attempt"], row["node_id"]) == (
        lost[0]["id"],
        "succeeded",
        2,
        "n2",
    )


async def test_completion_times_keep_their_instant_and_microseconds(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    """Times travel as ISO 8601 text with their offset: any zone, to the microsecond."""
    await add(store, every_10s("a", retries=1))
    node = await open_session("n1")
    (job,) = (await node.claim(ALL, 10, 30.0, now=at(10))).jobs
    retry_at = datetime(2026, 1, 1, 1, 0, 15, 654321, tzinfo=ZoneInfo("Europe/Berlin"))
    assert retry_at == at(15.654321)
    assert await node.completions.complete(
        [finish(job, "failed", retry_at=retry_at)], now=at(11)
    ) == {job.id}
    row = await job_row(settings, job.id)
    assert (row["next_run_at"], row["slot_at"], row["attempt"]) == (at(15.654321), at(10), 2)


# -- attempts that end without a completion ------------------------------------------------


async def test_release_records_the_attempt_as_lost(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await add(store, every_10s("a"))
    a = await open_session("node-a", "zone-a")
    (job,) = (await a.claim(ALL, 10, 30.0, now=at(10))).jobs
    assert await a.release([(job.id, job.lease_token)], "draining", now=at(12)) == {job.id}
    (row,) = await run_rows(settings)
    assert fields(row, *RUN, "duration_s", "last_error", "scheduled_for") == (
        "lost", 1, "node-a", "zone-a", job.lease_token, at(10), at(12), None, "draining", at(10)
    )  # fmt: skip
    assert (await job_row(settings, job.id))["locked_zone"] is None
    # Fenced like a completion: releasing again with the old token writes nothing.
    assert await a.release([(job.id, job.lease_token)], "again", now=at(13)) == set()
    assert await run_rows(settings) == [row]

    # Attempt 2 is lost too (its lease expires): the same row, now at attempt 2.
    b = await open_session("node-b", "zone-b")
    (again,) = (await b.claim(ALL, 10, 30.0, now=at(13))).jobs
    assert (again.slot, again.attempt) == (at(10), 2)
    assert [r["reason"] for r in await b.recover(ALL, ["node-b"], now=at(44))] == ["lease expired"]
    (row2,) = await run_rows(settings)
    assert row2["id"] == row["id"]
    assert fields(row2, *RUN, "last_error") == (
        "lost", 2, "node-b", "zone-b", again.lease_token, at(13), at(44),
        "lease expired (node node-b)",
    )  # fmt: skip


async def test_recovery_records_the_dead_owners_attempt_as_lost(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await add(store, every_10s("a", retries=1))  # lost with a retry left: due again
    dead = await open_session("dead", "zone-d")
    (job,) = (await dead.claim(ALL, 10, 300.0, now=at(10))).jobs
    await dead.close()
    heir = await open_session("heir", "zone-h")

    async def recovered() -> list[dict[str, Any]]:
        return await heir.recover(ALL, ["heir"], now=at(12))

    taken = await until(recovered, "the dead session's slot recovered", 5, interval_s=0.025)
    assert [(r["id"], r["attempt"], r["locked_by"]) for r in taken] == [(job.id, 2, "dead")]
    (row,) = await run_rows(settings)
    assert fields(row, *RUN, "last_error") == (
        "lost", 1, "dead", "zone-d", job.lease_token, at(10), at(12), "owner gone (node dead)"
    )  # fmt: skip


async def test_a_restarted_node_records_its_previous_process_attempts_as_lost(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await add(store, every_10s("a"), every_10s("b"))
    before = await open_session("n1", "za")
    claimed = {j.id: j for j in (await before.claim(ALL, 10, 300.0, now=at(10))).jobs}
    await before.close()
    after = await open_session("n1", "za")
    taken = await after.recover_own(now=at(12))
    assert {r["id"] for r in taken} == set(claimed)
    got = {r["job_id"]: r for r in await run_rows(settings)}
    assert set(got) == set(claimed)
    for job_id, job in claimed.items():
        assert fields(got[job_id], *RUN, "last_error") == (
            "lost", 1, "n1", "za", job.lease_token, at(10), at(12),
            "previous process gone (node n1)",
        )  # fmt: skip


# -- the listing and the status ------------------------------------------------------------


async def _history_with_attempts_in_flight(
    store: JobStore, open_session: Opener
) -> dict[str, Sequence[ClaimedJob]]:
    """a (default tenant): attempt 1 failed, attempt 2 in flight. b (acme): attempt 1 in
    flight. c (acme): slot 10 s succeeded, slot 20 s in flight."""
    await add(
        store,
        every_10s("a", retries=1),
        every_10s("b", tenant="acme"),
        every_10s("c", tenant="acme"),
    )
    node = await open_session("n1", "za")
    first = {j.name: j for j in (await node.claim(ALL, 10, 30.0, now=at(10))).jobs}
    assert len(await node.completions.complete([finish(first["c"])], now=at(11))) == 1
    retry = finish(first["a"], "failed", error="boom", retry_at=at(15))
    assert len(await node.completions.complete([retry], now=at(12))) == 1  # a's row is the newer
    second = {j.name: j for j in (await node.claim(ALL, 10, 30.0, now=at(20))).jobs}
    assert sorted(second) == ["a", "c"]
    return {"first": list(first.values()), "second": list(second.values())}


def summary(runs: Sequence[Run]) -> list[tuple[str, str, float, str, int]]:
    return [
        (r.tenant, r.job_name, (r.scheduled_for - T0).total_seconds(), r.status, r.attempt)
        for r in runs
    ]


async def test_the_runs_listing_shows_attempts_in_flight_and_filters_them(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await _history_with_attempts_in_flight(store, open_session)
    everything = await store.runs()
    # Newest slot first; within a slot, newest row first (attempts without one first).
    assert summary(everything) == [
        ("acme", "c", 20, "running", 1),
        ("acme", "b", 10, "running", 1),
        ("default", "a", 10, "running", 2),
        ("acme", "c", 10, "succeeded", 1),
    ]
    c_live, b_live, a_live, _ = everything
    assert (c_live.id, b_live.id) == (None, None)
    (a_row,) = [r for r in await run_rows(settings) if r["job_name"] == "a"]
    assert (a_live.id, a_live.last_error, a_live.node_id, a_live.zone) == (
        a_row["id"],
        "boom",
        "n1",
        "za",
    )
    assert (c_live.started_at, c_live.finished_at, c_live.duration_s) == (at(20), None, None)
    assert b_live.to_json()["id"] is None and b_live.to_json()["status"] == "running"

    assert summary(await store.runs(status="running")) == summary(everything[:3])
    # a's failed attempt is behind the attempt in flight on its slot: not listed as failed.
    assert await store.runs(status="failed") == []
    assert summary(await store.runs(status="succeeded")) == [("acme", "c", 10, "succeeded", 1)]
    assert summary(await store.runs(tenant="acme")) == [
        ("acme", "c", 20, "running", 1),
        ("acme", "b", 10, "running", 1),
        ("acme", "c", 10, "succeeded", 1),
    ]
    assert summary(await store.runs(job="a")) == [("default", "a", 10, "running", 2)]
    assert await store.runs(job="a", tenant="acme") == []
    assert await store.runs(job="b", status="succeeded") == []
    assert summary(await store.runs(job="c", tenant="acme", status="running")) == [
        ("acme", "c", 20, "running", 1)
    ]
    assert summary(await store.runs(limit=2)) == summary(everything[:2])


async def test_status_counts_attempts_in_flight_from_the_job_rows(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await _history_with_attempts_in_flight(store, open_session)
    status = await collect(settings, now=at(21))
    assert status.outcomes_1h["running"] == 3
    assert status.outcomes_1h["succeeded"] == 1
    assert status.outcomes_1h["failed"] == 0  # its slot's next attempt is in flight
    # First attempts started in the last minute, all claimed on time: a's and c's at
    # 10 s from their rows, b's at 10 s and c's at 20 s from their job rows.
    assert status.lag_samples == 4
    assert status.lag_p50_s == 0.0


@pytest.mark.new_schema
async def test_runs_by_status_reads_the_rare_outcomes_through_their_index(
    store: JobStore, settings: ClusterSettings
) -> None:
    """Successes, nearly every run row, are not in runs_by_status; a listing of failed
    runs still reads that index, not the whole table."""
    await add(store, every_10s("busy"))
    job = await store.get("busy")
    conn = await connect(settings, "loader")
    try:
        await conn.execute(
            """
            INSERT INTO runs (job_id, tenant_id, job_name, scheduled_for, status)
            SELECT %(id)s, 'default', 'busy', %(t0)s + make_interval(secs => i * 10),
                   CASE WHEN i %% 1000 = 0 THEN 'failed' ELSE 'succeeded' END
            FROM generate_series(1, 20000) AS i
            """,
            {"id": job.id, "t0": T0},
        )
        await conn.execute("ANALYZE runs")
    finally:
        await conn.close()
    params = {"job_name": None, "tenant_id": None, "status": "failed", "limit": 50}
    plan = await rows(settings, "EXPLAIN " + query("list_runs").decode(), params)
    text = "\n".join(str(next(iter(r.values()))) for r in plan)
    assert "runs_by_status" in text, text
    failed = await store.runs(status="failed", limit=50)
    assert len(failed) == 20 and {r.status for r in failed} == {"failed"}
