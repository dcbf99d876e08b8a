"""Business calendars end to end on real nodes: jobs created at an explicit past ``now``
catch up through a window holding a holiday. The holiday's slot of a daily job is recorded
skipped with the calendar as reason, a yearly slot on the holiday runs moved (its run row
keeps the nominal slot), the other slots run, and nothing runs twice across two nodes."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from cluster.timing.calendars import Calendar, parse_weekdays
from tests.helpers.fleet import Fleet
from tests.helpers.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]
WITNESS = "cluster.chaos.witness:record"
DAYS = 6


def test_a_holiday_inside_the_window_is_skipped_or_moved_and_nothing_runs_twice(
    settings: ClusterSettings, fleet: Fleet
) -> None:
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    start = today - timedelta(days=DAYS)
    holiday = today - timedelta(days=3)
    calendar = Calendar("office", parse_weekdays("mon-sun"), frozenset({holiday.date()}))
    daily = JobSpec.build("daily", "0 0 * * *", WITNESS, calendar="office", catch_up="backfill")
    yearly = JobSpec.build(
        "yearly",
        f"0 0 {holiday.day} {holiday.month} *",
        WITNESS,
        calendar="office",
        on_excluded="next-business-day",
        catch_up="backfill",
    )

    async def create() -> None:
        async with JobStore.open(settings) as store:
            await store.init(16)
            await store.calendars.put(calendar)
            for spec in (daily, yearly):  # as if created before the window
                await store.definitions.add(spec, now=start - timedelta(hours=1))

    asyncio.run(create())
    fleet.start("n1", "a")
    fleet.start("n2", "b")
    expected_daily = {start + timedelta(days=i) for i in range(DAYS + 1)} - {holiday}

    def caught_up() -> list[dict[str, object]] | None:
        fleet.check_alive()
        rows = fleet.sql("SELECT job_name, scheduled_for, status, last_error, origin FROM runs")
        daily_done = {r["scheduled_for"] for r in rows if r["job_name"] == "daily"}
        yearly_done = [r for r in rows if r["job_name"] == "yearly"]
        return rows if expected_daily | {holiday} <= daily_done and yearly_done else None

    rows = until(caught_up, "the daily job's window and the moved yearly slot", 60)
    daily_rows = {r["scheduled_for"]: r for r in rows if r["job_name"] == "daily"}
    assert daily_rows[holiday]["status"] == "skipped"
    assert "calendar office" in str(daily_rows[holiday]["last_error"])
    assert all(daily_rows[s]["status"] == "succeeded" for s in expected_daily)
    (moved,) = [r for r in rows if r["job_name"] == "yearly"]
    assert (moved["scheduled_for"], moved["status"], moved["origin"]) == (
        holiday,
        "succeeded",
        "calendar",
    )

    runs = Counter((e.job, e.slot) for e in fleet.executions())
    assert runs, "the witness saw the runs"
    assert max(runs.values()) == 1, f"a slot ran twice: {runs.most_common(3)}"
    assert ("daily", holiday) not in runs
    assert ("yearly", holiday) in runs
    (job,) = fleet.sql("SELECT slot_at, next_run_at FROM jobs WHERE name = 'yearly'")
    assert job["slot_at"].year == holiday.year + 1, "the yearly job waits for next year"
