"""``pulse jobs show --explain`` from any instant, with what was recorded for past slots; a
done or paused job says so instead of listing runs; ``pulse schedule --explain`` with a
cluster's calendar; ``show`` lists one timeline in slot order; bad instants are one line
and exit 2."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from cluster.store.jobstore.timeline import stopped
from node.pipeline.outcomes import after_run
from tests.helpers.cli import Invoke, assert_bad_input
from tests.helpers.outbox import outcome
from tests.helpers.sessions import LockSessions, Opener

ALL = range(16)
H = timedelta(hours=1)
T0 = datetime(2031, 6, 2, 10, 30, tzinfo=UTC)
ELEVEN = datetime(2031, 6, 2, 11, 0, tzinfo=UTC)


async def test_explain_from_a_past_instant_shows_what_was_recorded(
    store: JobStore, open_session: Opener
) -> None:
    await store.definitions.add(JobSpec.build("sync", "0 * * * *", "shell:true"), now=T0)
    node = await open_session("n1")
    for slot, status in ((ELEVEN, "succeeded"), (ELEVEN + H, "failed")):
        (job,) = (await node.claim(ALL, 10, 30.0, now=slot)).jobs
        done, skips = after_run(job, outcome(status, "boom"), slot)
        await node.completions.complete([done], skips, now=slot)
    now = ELEVEN + H + timedelta(minutes=30)
    _, steps = await store.explain("sync", after=T0, count=3, now=now)
    assert [(s.slot, s.action) for s in steps] == [
        (ELEVEN, "succeeded"), (ELEVEN + H, "failed"), (ELEVEN + 2 * H, "runs")
    ]  # fmt: skip
    assert steps[1].notes[-1] == "recorded failed: boom"


def test_explain_says_done_instead_of_listing_runs(
    settings: ClusterSettings, initialised: Invoke
) -> None:
    async def run_its_one_run() -> None:
        async with JobStore.open(settings) as store:
            spec = JobSpec.build("once", "0 * * * *", "shell:true", max_runs=1)
            await store.definitions.add(spec, now=T0)
        sessions = LockSessions(settings)
        try:
            node = await sessions("n1")
            (job,) = (await node.claim(ALL, 10, 30.0, now=ELEVEN)).jobs
            done, skips = after_run(job, outcome(), ELEVEN)
            await node.completions.complete([done], skips, now=ELEVEN)
        finally:
            await sessions.close()

    asyncio.run(run_its_one_run())
    shown = initialised("jobs", "show", "once", "--explain")
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.splitlines() == ["done: no slot runs any more"]


def test_explain_says_paused_and_refuses_bad_instants(initialised: Invoke) -> None:
    added = initialised("jobs", "add", "tick", "--schedule", "@hourly", "--handler", "shell:true")
    assert added.exit_code == 0, added.output
    next_month = (datetime.now(UTC) + timedelta(days=31)).replace(microsecond=0)
    later = initialised(
        "jobs", "show", "tick", "--explain", "--after", next_month.isoformat(), "--count", "2",
        "--json",
    )  # fmt: skip
    steps = json.loads(later.stdout)
    assert [s["action"] for s in steps] == ["runs", "runs"]
    assert datetime.fromisoformat(steps[0]["slot"]) > next_month
    assert initialised("jobs", "pause", "tick").exit_code == 0
    paused = initialised("jobs", "show", "tick", "--explain").stdout
    assert paused.splitlines() == ["paused: no slot runs until it is resumed"]
    for bad in ("next monday", "2031-06-02T10:00:00", "0001-01-01T00:00:00+00:00"):
        assert_bad_input(initialised("jobs", "show", "tick", "--explain", "--after", bad), "after")


def test_schedule_explains_slots_with_a_calendar_of_the_cluster(initialised: Invoke) -> None:
    made = initialised("calendars", "add", "office", "--dates", "2031-12-25")
    assert made.exit_code == 0, made.output
    args = ["schedule", "0 9 * * *", "--explain", "--calendar", "office",
            "--after", "2031-12-24T10:00:00+00:00", "--count", "1", "--json"]  # fmt: skip
    steps = json.loads(initialised(*args).stdout)
    assert [(s["slot"][:10], s["action"]) for s in steps] == [
        ("2031-12-25", "skipped"), ("2031-12-26", "runs")
    ]  # fmt: skip
    assert "2031-12-25 is a holiday" in steps[0]["notes"][-1]
    monthly = ["schedule", "0 9 25 * *", *args[2:], "--on-excluded", "next-business-day"]
    moved = json.loads(initialised(*monthly).stdout)
    assert [(s["slot"][:10], s["action"], s["start"][:10]) for s in moved] == [
        ("2031-12-25", "moved", "2031-12-26")
    ]
    assert_bad_input(initialised(*args[:4], "ghost", *args[5:]), "calendar")
    assert_bad_input(initialised(*args, "--on-excluded", "never"), "on_excluded")


def test_show_lists_its_slots_in_order(initialised: Invoke) -> None:
    soon = (datetime.now(UTC) + timedelta(days=2)).date()
    made = initialised(
        "calendars", "add", "office", "--weekdays", "mon-sun", "--dates", soon.isoformat()
    )
    assert made.exit_code == 0, made.output
    added = initialised("jobs", "add", "report", "--schedule", "0 9 * * *",
                        "--handler", "shell:true", "--calendar", "office")  # fmt: skip
    assert added.exit_code == 0, added.output
    text = initialised("jobs", "show", "report").stdout.splitlines()
    start = text.index("next slots:") + 1
    listed = [line.split()[0] for line in text[start:] if line.startswith("  20")]
    assert any("skipped" in line for line in text[start:]), text
    assert listed == sorted(listed) and len(listed) == 6, text


async def test_explain_of_a_job_paused_until_a_time_lists_nothing_before_it(
    store: JobStore,
) -> None:
    await store.definitions.add(JobSpec.build("sync", "0 * * * *", "shell:true"), now=T0)
    until = ELEVEN + 2 * H
    await store.holds.pause_until("sync", "default", until, now=T0)
    job, steps = await store.explain("sync", count=1, now=T0)
    assert (
        stopped(job, T0)
        == f"paused until {until.isoformat()}: its next slot is {until.isoformat()}"
    )
    assert [(s.slot, s.action) for s in steps] == [
        (ELEVEN, "skipped"), (ELEVEN + H, "skipped"), (until, "runs")
    ]  # fmt: skip
    assert steps[0].notes[-1] == f"not planned: the job's next slot is {until.isoformat()}"
