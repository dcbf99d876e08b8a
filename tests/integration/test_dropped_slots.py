"""A new definition that moves a job past its overdue slots (``pulse jobs apply`` of a new
timing, ``pulse jobs rollback`` to an older one, while no node ran them: an outage) records
each of them skipped with that reason, and ``pulse audit`` finds none missing; a change
that keeps the job's timing keeps its slot, to be run (docs/design/gates.md, the slot
ledger in docs/guarantees.md)."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime

from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from node.handlers.context import Outcome
from node.pipeline.outcomes import after_run
from tests.helpers.cli import invoke
from tests.helpers.history import add, every_10s, finish, rows
from tests.helpers.sessions import ALL, T0, Opener, at

REVISED = "UPDATE job_revisions SET at = %s WHERE revision = %s RETURNING 1"
SKIPS = (
    "SELECT scheduled_for, last_error FROM runs WHERE job_name = %s AND status = 'skipped' "
    "ORDER BY scheduled_for"
)
MOVED = "a new timing moved the job past it before it ran"


async def verdicts(settings: ClusterSettings, job: str, end: datetime) -> list[tuple[str, str]]:
    """``pulse audit --json`` of ``job`` from T0 to ``end`` (exit 0): (slot, verdict)."""
    span = ("--from", T0.isoformat(), "--to", end.isoformat(), "--job", job, "--json")
    result = await asyncio.to_thread(invoke, settings, "audit", *span)
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    return [(x["slot"], x["verdict"]) for x in lines if x["type"] == "slot"]


async def test_apply_and_rollback_record_the_overdue_slots_they_move_a_job_past(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await add(store, every_10s("moved"))
    await rows(settings, REVISED, (T0, 1))
    node = await open_session("n1", "za")
    (job,) = (await node.claim(ALL, 10, 30.0, now=at(10))).jobs
    await node.completions.complete([finish(job)], now=at(11))
    # An outage: the slots at 20, 30 and 40 s are due and no node runs them. A new timing
    # at 45 s moves the job to its first slot after then (60 s).
    every_15s = JobSpec.build("moved", "@every 15s", "cluster.chaos.witness:record")
    await store.definitions.apply([every_15s], now=at(45))
    await rows(settings, REVISED, (at(45), 2))
    assert (await store.get("moved")).slot_at == at(60)
    # Another outage, and a rollback to the first timing at 70 s: the slot at 60 s is passed.
    await store.revisions.rollback("moved", "default", 1, now=at(70))
    await rows(settings, REVISED, (at(70), 3))
    assert (await store.get("moved")).slot_at == at(80)

    skipped = await rows(settings, SKIPS, ("moved",))
    assert [(r["scheduled_for"], r["last_error"]) for r in skipped] == [
        (at(20), f"skipped by pulse jobs apply: {MOVED}"),
        (at(30), f"skipped by pulse jobs apply: {MOVED}"),
        (at(40), f"skipped by pulse jobs apply: {MOVED}"),
        (at(60), f"skipped by pulse jobs rollback: {MOVED}"),
    ]
    assert await verdicts(settings, "moved", at(80)) == [
        (at(10).isoformat(), "ran"),
        *((at(s).isoformat(), "skipped") for s in (20, 30, 40, 60)),
    ]


async def test_a_change_that_keeps_the_timing_keeps_the_overdue_slot(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await add(store, every_10s("kept"))
    # Overdue at 25 s; a new handler is no new timing: the slot at 10 s is still the job's,
    # and a node runs it (catch-up decides the one at 20 s), so nothing is recorded here.
    spec = JobSpec.build("kept", "@every 10s", "cluster.chaos.witness:other")
    await store.definitions.apply([spec], now=at(25))
    assert (await store.get("kept")).slot_at == at(10)
    assert await rows(settings, SKIPS, ("kept",)) == []
    node = await open_session("n1", "za")
    (job,) = (await node.claim(ALL, 10, 30.0, now=at(25))).jobs
    assert job.slot == at(10)


async def test_a_new_timing_keeps_the_retry_of_a_failed_slot(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    """A slot that failed and waits for its retry keeps it through a new timing, as
    through a change that keeps the timing: the retry runs at its time, under the new
    definition, and the job goes on at the new timing (its old slots passed meanwhile
    recorded skipped)."""
    await add(store, every_10s("retried", retries=2))
    await rows(settings, REVISED, (T0, 1))
    node = await open_session("n1", "za")
    (job,) = (await node.claim(ALL, 10, 30.0, now=at(10))).jobs
    failed = finish(job, "failed", error="boom", retry_at=at(40))
    await node.completions.complete([failed], now=at(11))

    every_15s = JobSpec.build("retried", "@every 15s", "cluster.chaos.witness:record", retries=2)
    await store.definitions.apply([every_15s], now=at(25))
    await rows(settings, REVISED, (at(25), 2))
    kept = await store.get("retried")
    assert (kept.slot_at, kept.next_run_at, kept.attempt) == (at(10), at(40), 2)
    assert [r["scheduled_for"] for r in await rows(settings, SKIPS, ("retried",))] == [at(20)]

    (job,) = (await node.claim(ALL, 10, 30.0, now=at(40))).jobs
    assert (job.slot, job.attempt) == (at(10), 2)
    done, skips = after_run(job, Outcome("succeeded", None, 0.01), at(41))
    await node.completions.complete([done], skips, now=at(41))
    (record,) = await rows(
        settings, "SELECT status, attempt FROM runs WHERE scheduled_for = %s", (at(10),)
    )
    assert (record["status"], record["attempt"]) == ("succeeded", 2)
    # On at the new timing: its newest slot due by then runs next (catch-up once).
    assert (await store.get("retried")).slot_at == at(30)

    found = dict(await verdicts(settings, "retried", at(30)))
    assert (found[at(10).isoformat()], found[at(20).isoformat()]) == ("reran", "skipped")


async def test_a_kept_slot_walks_on_to_the_new_timings_slots_from_the_change(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    """A job whose retry waits when its timing changes runs that retry, then goes on to the
    new timing's first slot after the change: not to the new timing's slots before it,
    which were never the job's (a `backfill` catch-up ran them all). The old timing's slots
    between the two are recorded skipped by the apply, those the new timing has too (20 s
    here) included."""
    await add(store, every_10s("walked", retries=2, catch_up="backfill"))
    await rows(settings, REVISED, (T0, 1))
    node = await open_session("n1", "za")
    (job,) = (await node.claim(ALL, 10, 30.0, now=at(10))).jobs
    failed = finish(job, "failed", error="boom", retry_at=at(40))
    await node.completions.complete([failed], now=at(11))

    every_5s = JobSpec.build(
        "walked", "@every 5s", "cluster.chaos.witness:record", retries=2, catch_up="backfill"
    )
    await store.definitions.apply([every_5s], now=at(25))
    await rows(settings, REVISED, (at(25), 2))
    assert (await store.get("walked")).timing_from == at(25)
    skipped = await rows(settings, SKIPS, ("walked",))
    assert [(r["scheduled_for"], r["last_error"]) for r in skipped] == [
        (at(20), f"skipped by pulse jobs apply: {MOVED}")
    ]

    (job,) = (await node.claim(ALL, 10, 30.0, now=at(40))).jobs
    assert (job.slot, job.attempt, job.timing_from) == (at(10), 2, at(25))
    done, skips = after_run(job, Outcome("succeeded", None, 0.01), at(41))
    assert (done.next_slot, skips) == (at(30), [])  # not 15 s: no slot of the job
    await node.completions.complete([done], skips, now=at(41))
    (job,) = (await node.claim(ALL, 10, 30.0, now=at(41))).jobs
    assert job.slot == at(30)
    await node.completions.complete([finish(job)], now=at(42))

    assert await verdicts(settings, "walked", at(31)) == [
        (at(10).isoformat(), "reran"),
        (at(20).isoformat(), "skipped"),
        (at(30).isoformat(), "ran"),
    ]


async def test_a_running_one_off_given_another_time_runs_at_it(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    """A one-off job whose run was in progress when an apply gave it another time became
    `done` when the run ended: its new time never ran, and had no record."""
    witness = "cluster.chaos.witness:record"
    await add(store, JobSpec.build("once", f"@at {at(10).isoformat()}", witness))
    await rows(settings, REVISED, (T0, 1))
    node = await open_session("n1", "za")
    (job,) = (await node.claim(ALL, 10, 30.0, now=at(10))).jobs
    new = JobSpec.build("once", f"@at {at(60).isoformat()}", witness)
    await store.definitions.apply([new], now=at(20))
    await rows(settings, REVISED, (at(20), 2))
    done, skips = after_run(job, Outcome("succeeded", None, 0.01), at(30))
    await node.completions.complete([done], skips, now=at(30))
    moved = await store.get("once")
    assert (moved.status, moved.slot_at) == ("idle", at(60))
    (again,) = (await node.claim(ALL, 10, 30.0, now=at(60))).jobs
    assert again.slot == at(60)
    done, skips = after_run(again, Outcome("succeeded", None, 0.01), at(61))
    await node.completions.complete([done], skips, now=at(61))
    assert (await store.get("once")).status == "done"
    assert await verdicts(settings, "once", at(70)) == [
        (at(10).isoformat(), "ran"),
        (at(60).isoformat(), "ran"),
    ]
