"""Slots whose fate was decided in several places and came out wrong, each against a real
Postgres with an explicit clock, driven through the node's claim and completion statements:
a deferring window under catch-up ``once`` runs one slot, a window over the job's next slot
records the slots it covers, a calendar job's excluded slots are recorded and shown, and a
``skipped`` alert says the real reason."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from cluster.store.jobstore.timeline import explain_job
from cluster.store.lock.session import LockSession
from cluster.timing.calendars import Calendar
from node.pipeline.outcomes import after_run, plan_at_claim
from tests.helpers.outbox import add_rule, events, outcome
from tests.helpers.sessions import Opener

pytestmark = pytest.mark.timeout(60)
ALL = range(16)
H = timedelta(hours=1)
T0 = datetime(2031, 6, 2, 10, 30, tzinfo=UTC)  # a Monday
ELEVEN = datetime(2031, 6, 2, 11, 0, tzinfo=UTC)
HOOK = "http://127.0.0.1:9/hook"


def hourly(name: str = "sync", **options: object) -> JobSpec:
    return JobSpec.build(name, "0 * * * *", "shell:true", **options)  # type: ignore[arg-type]


async def drive(node: LockSession, now: datetime, ahead_s: float = 0.0) -> list[datetime]:
    """Claim what is due at ``now`` (``ahead_s`` early, as a node claims) and complete it as
    the node would; the slots that ran."""
    ran = []
    for job in (await node.claim(ALL, 10, 30.0, now=now, ahead_s=ahead_s)).jobs:
        skip = plan_at_claim(job, now)
        if skip is None:
            ran.append(job.slot)
        done, skips = skip or after_run(job, outcome(), now)
        assert await node.completions.complete([done], skips, now=now) == {job.id}
    return ran


async def test_a_defer_window_runs_one_slot_under_catch_up_once(
    store: JobStore, open_session: Opener
) -> None:
    await store.definitions.add(hourly(catch_up="once"), now=T0)
    end = ELEVEN + 3 * H + timedelta(minutes=30)  # 11:00 runs; 12:00 to 14:00 are deferred
    await store.windows.add(ELEVEN + timedelta(minutes=30), end, job="sync", defer=True, now=T0)
    node = await open_session("n1")
    ran = await drive(node, ELEVEN)
    # Claimed a moment before the window's end, as a node claims ahead of a start.
    early = end - timedelta(seconds=0.05)
    ran += await drive(node, early, ahead_s=0.1)
    for _ in range(3):  # whatever the coalescing left due at the end runs now
        ran += await drive(node, end)
    assert ran == [ELEVEN, ELEVEN + 3 * H], "one run for the three deferred slots"
    runs = {r.scheduled_for: r for r in await store.runs(job="sync")}
    for slot in (ELEVEN + H, ELEVEN + 2 * H):
        assert runs[slot].status == "skipped"
        assert "deferred to" in (runs[slot].last_error or "")
        assert "coalesced into " + (ELEVEN + 3 * H).isoformat() in (runs[slot].last_error or "")


async def test_a_window_over_the_next_slot_records_the_slots_it_covers(
    store: JobStore, open_session: Opener
) -> None:
    await store.definitions.add(hourly(), now=T0)
    assert (await store.get("sync")).slot_at == ELEVEN  # the window's first slot is next
    change = await store.windows.add(
        ELEVEN - timedelta(minutes=5), ELEVEN + 2 * H, job="sync", now=T0
    )
    job = await store.get("sync")
    assert job.slot_at == ELEVEN + 2 * H
    runs = {r.scheduled_for: r for r in await store.runs(job="sync")}
    assert sorted(runs) == [ELEVEN, ELEVEN + H]
    for slot in (ELEVEN, ELEVEN + H):
        assert runs[slot].status == "skipped"
        assert f"blackout window {change.window.id}" in (runs[slot].last_error or "")
    node = await open_session("n1")
    assert await drive(node, ELEVEN + 2 * H) == [ELEVEN + 2 * H]


async def test_a_deferring_window_over_the_next_slot_runs_once_at_its_end(
    store: JobStore, open_session: Opener
) -> None:
    await store.definitions.add(hourly(), now=T0)
    end = ELEVEN + 2 * H
    await store.windows.add(ELEVEN - timedelta(minutes=5), end, job="sync", defer=True, now=T0)
    job = await store.get("sync")
    assert (job.slot_at, job.next_run_at) == (ELEVEN, end)
    node = await open_session("n1")
    ran = await drive(node, end) + await drive(node, end)
    assert ran == [end], "the deferred slots and the one at the end: one run"
    runs = {r.scheduled_for: r for r in await store.runs(job="sync")}
    assert [runs[s].status for s in (ELEVEN, ELEVEN + H, end)] == [
        "skipped", "skipped", "succeeded"
    ]  # fmt: skip
    assert all("deferred to" in (runs[s].last_error or "") for s in (ELEVEN, ELEVEN + H))


async def test_a_calendar_jobs_excluded_slots_are_recorded_and_explained(
    store: JobStore, open_session: Opener
) -> None:
    saturday = datetime(2031, 6, 7, 8, 0, tzinfo=UTC)
    monday = datetime(2031, 6, 9, 9, 0, tzinfo=UTC)
    await store.calendars.put(Calendar("office"), now=saturday)
    spec = JobSpec.build("report", "0 9 * * *", "shell:true", calendar="office")
    await store.definitions.add(spec, now=saturday)
    job = await store.get("report")
    assert job.slot_at == monday
    weekend = [monday - timedelta(days=2), monday - timedelta(days=1)]
    runs = await store.runs(job="report")
    assert sorted((r.scheduled_for, r.status) for r in runs) == [(d, "skipped") for d in weekend]
    assert all("not a business weekday" in (r.last_error or "") for r in runs)

    steps = explain_job(job, saturday, 2, recorded={r.scheduled_for: r for r in runs})
    assert [(s.slot, s.action) for s in steps[:3]] == [
        (weekend[0], "skipped"), (weekend[1], "skipped"), (monday, "runs")
    ]  # fmt: skip
    assert any("not a business weekday" in note for note in steps[0].notes)
    shown = await store.details("report", now=saturday)
    listed = [s["slot"] for s in shown["calendar_skips"]]
    assert [w.isoformat() for w in weekend] == listed[:2], "show lists the weekend ahead"


async def test_skipped_alerts_say_the_window_not_catch_up(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await store.definitions.add(hourly(), now=T0)
    await add_rule(settings, "ops", HOOK, events="skipped")
    await store.windows.add(ELEVEN + H, ELEVEN + 3 * H, job="sync", now=T0)
    node = await open_session("n1")
    assert await drive(node, ELEVEN) == [ELEVEN]  # its completion records 12:00 and 13:00
    (event,) = await events(settings)
    assert event["detail"].startswith("2 slots skipped: blackout window ")
    assert "catch-up" not in event["detail"]


@pytest.mark.parametrize("job", ["paused", "idle"])
async def test_a_trigger_claimed_after_a_slot_came_due_runs_itself(
    store: JobStore, open_session: Opener, job: str
) -> None:
    """A trigger claimed past the job's grace, a regular slot due since (a backlog, nodes
    down): the trigger runs, as the operator asked. Before, catch-up took the triggered
    slot for a missed one: it was recorded skipped, "coalesced into" the regular slot,
    which a paused job never ran."""
    await store.definitions.add(hourly(grace="30s", paused=job == "paused"), now=T0)
    node = await open_session("n1")
    if job == "idle":
        assert await drive(node, ELEVEN) == [ELEVEN]
    asked = ELEVEN + H - timedelta(seconds=50)  # 11:59:10
    await store.trigger("sync", now=asked)
    claimed = ELEVEN + H + timedelta(seconds=10)  # 12:00 is due, the trigger 60 s late
    assert await drive(node, claimed) == [asked]
    expected = [(asked, "succeeded", "trigger")]
    if job == "idle":  # then its own slot of 12:00, on time for catch-up
        assert await drive(node, claimed) == [ELEVEN + H]
        expected = [(ELEVEN, "succeeded", "schedule"), *expected]
        expected.append((ELEVEN + H, "succeeded", "schedule"))
    found = sorted((r.scheduled_for, r.status, r.origin) for r in await store.runs(job="sync"))
    assert found == expected
    assert (await store.get("sync")).status == job
