"""Alert events are written by the statement that changes the state they report (the
outbox): ``complete`` raises failed, recovered, skipped and paused, ``recover`` raises lost,
each only for the rules that want it, and a write that is fenced raises nothing. Auto-pause
happens in the same statement. Database time is driven with explicit ``now=``."""

from __future__ import annotations

import pytest

from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from node.pipeline.outcomes import after_run
from tests.helpers.history import finish
from tests.helpers.outbox import (
    ALL,
    T0,
    add_rule,
    at,
    events,
    every_10s,
    names,
    outcome,
    run_slot,
    sql,
)
from tests.helpers.sessions import Opener

pytestmark = pytest.mark.timeout(60)
HOOK = "http://127.0.0.1:9/hook"


async def test_events_reach_only_the_rules_that_want_them(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await store.definitions.apply([every_10s("a"), every_10s("b", tenant="acme")], now=T0)
    await add_rule(settings, "everything", HOOK)
    await add_rule(settings, "acme-failed", HOOK, events="failed", tenant="acme")
    await add_rule(settings, "a-lost", HOOK, events="lost", job="a")
    node = await open_session("n1")
    await run_slot(node, at(10), "failed")
    got = sorted(
        (e["event"], e["job_name"], e["tenant_id"], e["rule"]) for e in await events(settings)
    )
    assert got == [
        ("failed", "a", "default", "everything"),
        ("failed", "b", "acme", "acme-failed"),
        ("failed", "b", "acme", "everything"),
    ]
    # One event row per event, however many rules get it; none when no rule wants it.
    await sql(settings, "DELETE FROM alert_rules WHERE name = 'everything'")
    await run_slot(node, at(20), "failed")
    counts = await sql(settings, "SELECT job_name, count(*) AS n FROM alert_events GROUP BY 1")
    assert sorted((r["job_name"], r["n"]) for r in counts) == [("a", 1), ("b", 2)]


async def test_only_the_last_attempt_of_a_slot_raises_failed(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await store.definitions.apply([every_10s("a", retries=1)], now=T0)
    await add_rule(settings, "ops", HOOK)
    node = await open_session("n1", "zone-1")
    await run_slot(node, at(10), "failed", "first")  # retried in 10 s: no event
    assert await events(settings) == []
    await run_slot(node, at(20), "timed_out", "timed out after 5m")
    (event,) = await events(settings)
    assert (event["event"], event["slot"], event["attempt"], event["node_id"], event["zone"]) == (
        "failed",
        at(10),
        2,
        "n1",
        "zone-1",
    )
    assert event["error"] == "timed out after 5m"
    assert (await store.get("a")).failed_slots == 1


async def test_the_first_success_after_failed_slots_raises_recovered(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await store.definitions.apply([every_10s("a")], now=T0)
    await add_rule(settings, "ops", HOOK)
    node = await open_session("n1")
    await run_slot(node, at(10), "failed")
    await run_slot(node, at(20), "failed")
    assert (await store.get("a")).failed_slots == 2
    await run_slot(node, at(30))
    await run_slot(node, at(40))
    assert await names(settings) == [("failed", "a"), ("failed", "a"), ("recovered", "a")]
    recovered = (await events(settings))[-1]
    assert (recovered["slot"], recovered["detail"]) == (at(30), "succeeded after 2 failed slots")
    assert (await store.get("a")).failed_slots == 0


async def test_a_catch_up_raises_one_skipped_event(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await store.definitions.apply([every_10s("late"), every_10s("slow")], now=T0)
    await add_rule(settings, "ops", HOOK, events="skipped")
    node = await open_session("n1")
    jobs = {j.name: j for j in (await node.claim(ALL, 10, 30.0, now=at(10))).jobs}
    for name, ended in (("late", 11), ("slow", 35)):
        done, skips = after_run(jobs[name], outcome(), at(ended))
        assert await node.completions.complete([done], skips, now=at(ended)) == {jobs[name].id}
    # "slow" ran until 35 s: 20 s was missed and 30 s runs next (catch-up once). At 45 s
    # "late" skips 20 and 30 s at its claim and runs 40 s; "slow" skips 30 s.
    await run_slot(node, at(45))
    got = [(e["job_name"], e["slot"], e["detail"]) for e in await events(settings)]
    assert sorted(got) == [
        ("late", at(20), "2 slots skipped by catch-up once"),
        ("slow", at(20), "1 slot skipped by catch-up once"),
        ("slow", at(30), "1 slot skipped by catch-up once"),
    ]


async def test_the_nth_failed_slot_in_a_row_pauses_the_job_in_the_same_statement(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await store.definitions.apply([every_10s("a", pause_after_failures=2)], now=T0)
    await add_rule(settings, "ops", HOOK)
    node = await open_session("n1")
    await run_slot(node, at(10), "failed", "boom 1")
    await run_slot(node, at(20))  # a success resets the count
    await run_slot(node, at(30), "failed", "boom 2")
    assert (await store.get("a")).status == "idle"
    await run_slot(node, at(40), "failed", "boom 3")
    job = await store.get("a")
    assert (job.status, job.paused, job.next_run_at, job.failed_slots) == ("paused", True, None, 2)
    assert job.pause_note == "paused after 2 failed slots in a row; last error: boom 3"
    assert await names(settings) == [
        ("failed", "a"),
        ("recovered", "a"),
        ("failed", "a"),
        ("failed", "a"),
        ("paused", "a"),
    ]
    paused = (await events(settings))[-1]
    assert (paused["slot"], paused["detail"]) == (at(40), job.pause_note)
    assert (await node.claim(ALL, 10, 30.0, now=at(100))).jobs == []
    # Resuming clears the note and the count.
    resumed = await store.resume("a", now=at(100))
    assert (resumed.status, resumed.failed_slots, resumed.pause_note) == ("idle", 0, None)


async def test_auto_pause_leaves_a_job_paused_by_hand_alone(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await store.definitions.apply([every_10s("a", pause_after_failures=1)], now=T0)
    await add_rule(settings, "ops", HOOK)
    node = await open_session("n1")
    job = (await node.claim(ALL, 10, 30.0, now=at(10))).jobs[0]
    await store.pause("a", note="maintenance")  # while it runs
    done = finish(job, "failed", error="boom")
    assert await node.completions.complete([done], now=at(11)) == {job.id}
    after = await store.get("a")
    assert (after.status, after.pause_note, after.failed_slots) == ("paused", "maintenance", 1)
    assert await names(settings) == [("failed", "a")]


async def test_recovery_raises_lost_and_a_fenced_completion_raises_nothing(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await store.definitions.apply([every_10s("a", retries=1)], now=T0)
    await add_rule(settings, "ops", HOOK)
    stale, heir = await open_session("n1", "za"), await open_session("n2", "zb")
    (job,) = (await stale.claim(ALL, 10, 30.0, now=at(10))).jobs
    assert len(await heir.recover(ALL, ["n1", "n2"], now=at(41))) == 1
    (lost,) = await events(settings)
    assert (lost["event"], lost["attempt"], lost["node_id"], lost["zone"], lost["detail"]) == (
        "lost",
        1,
        "n1",
        "za",
        "lease expired (node n1)",
    )
    # The stale node finishes late and fails: fenced, so no failed event either.
    assert (
        await stale.completions.complete([finish(job, "failed", error="late")], now=at(45)) == set()
    )
    assert await names(settings) == [("lost", "a")]
