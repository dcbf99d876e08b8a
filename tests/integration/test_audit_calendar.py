"""``pulse audit`` of calendar jobs: the slots a business calendar excludes (weekends, a
holiday) are expected slots, each recorded ``skipped`` with the calendar's reason (or run on
another day under its nominal slot), never ``missing``, when a node runs the job with its
own claim and completion statements on an explicit clock (docs/design/audit.md)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from cluster.store.lock.session import LockSession
from cluster.timing.calendars import Calendar
from node.pipeline.outcomes import after_run, plan_at_claim
from tests.helpers.cli import audit_slots
from tests.helpers.history import rows
from tests.helpers.sessions import ALL, OK, T0, Opener

HANDLER = "cluster.chaos.witness:record"
HOLIDAY = datetime(2026, 1, 6, tzinfo=UTC).date()  # a Tuesday; T0 is Thursday 1 January
WEEK = [datetime(2026, 1, day, 9, 0, tzinfo=UTC) for day in range(1, 8)]  # Thu .. Wed
THU, FRI, SAT, SUN, MON, TUE, WED = WEEK
END = datetime(2026, 1, 8, tzinfo=UTC)


async def run_week(store: JobStore, node: LockSession, settings: ClusterSettings) -> None:
    """A node's pass every hour from T0 to the range's end: claims, skips at the claim and
    completions as the node decides them (``plan_at_claim``, ``after_run``)."""
    await rows(settings, "UPDATE job_revisions SET at = %s RETURNING 1", (T0,))
    now = T0
    while now < END:
        now += timedelta(hours=1)
        jobs = (await node.claim(ALL, 10, 30.0, now=now)).jobs
        for job in jobs:
            skip = plan_at_claim(job, now)
            done, skips = skip if skip is not None else after_run(job, OK, now)
            await node.completions.complete([done], skips, now=now)


async def audit(settings: ClusterSettings, job: str) -> tuple[int, dict[datetime, Any]]:
    code, lines = await audit_slots(settings, job, T0, END)
    return code, {
        datetime.fromisoformat(line["slot"]): (line["verdict"], line["detail"]) for line in lines
    }


@pytest.mark.parametrize("on_excluded", ["skip", "next-business-day"])
async def test_a_calendar_jobs_excluded_days_are_skipped_records_not_missing(
    store: JobStore, settings: ClusterSettings, open_session: Opener, on_excluded: str
) -> None:
    await store.calendars.put(Calendar("office", frozenset(range(5)), frozenset({HOLIDAY})))
    spec = JobSpec.build("daily", "0 9 * * *", HANDLER, calendar="office", on_excluded=on_excluded)
    await store.definitions.add(spec, now=T0)
    await run_week(store, await open_session("n1", "za"), settings)

    code, slots = await audit(settings, "daily")
    assert code == 0, slots
    assert sorted(slots) == WEEK
    assert {s: v for s, (v, _) in slots.items()} == {
        THU: "ran", FRI: "ran", SAT: "skipped", SUN: "skipped", MON: "ran", TUE: "skipped",
        WED: "ran",
    }  # fmt: skip
    for day, why in (
        (SAT, "is not a business weekday"),
        (SUN, "is not a business weekday"),
        (TUE, "is a holiday"),
    ):
        assert f"calendar office: {day.date().isoformat()} {why}" in slots[day][1], slots[day]


async def test_a_slot_moved_to_the_next_business_day_runs_under_its_nominal_slot(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    """A Saturday job moved to Monday is one slot, Saturday's, run on Monday: ``ran``."""
    await store.calendars.put(Calendar("office", frozenset(range(5)), frozenset({HOLIDAY})))
    spec = JobSpec.build(
        "weekly", "0 9 * * 6", HANDLER, calendar="office", on_excluded="next-business-day"
    )
    await store.definitions.add(spec, now=T0)
    await run_week(store, await open_session("n1", "za"), settings)

    code, slots = await audit(settings, "weekly")
    assert code == 0 and list(slots) == [SAT], slots
    (run,) = await rows(settings, "SELECT * FROM runs WHERE job_name = 'weekly'")
    assert (run["status"], run["origin"], run["started_at"]) == ("succeeded", "calendar", MON)


async def test_a_calendar_job_created_on_an_excluded_day_records_the_days_before_its_first_slot(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    """Created on Saturday morning: Saturday's and Sunday's slots come before its first run,
    passed by no completion; they are recorded when the job is written."""
    await store.calendars.put(Calendar("office", frozenset(range(5)), frozenset({HOLIDAY})))
    saturday = datetime(2026, 1, 3, 8, 0, tzinfo=UTC)
    await store.definitions.add(
        JobSpec.build("late", "0 9 * * *", HANDLER, calendar="office"), now=saturday
    )
    await rows(settings, "UPDATE job_revisions SET at = %s RETURNING 1", (saturday,))
    node = await open_session("n1", "za")
    now = saturday
    while now < END:
        now += timedelta(hours=1)
        for job in (await node.claim(ALL, 10, 30.0, now=now)).jobs:
            done, skips = plan_at_claim(job, now) or after_run(job, OK, now)
            await node.completions.complete([done], skips, now=now)

    code, slots = await audit(settings, "late")
    assert code == 0, slots
    assert {s: v for s, (v, _) in slots.items()} == {
        SAT: "skipped",
        SUN: "skipped",
        MON: "ran",
        TUE: "skipped",
        WED: "ran",
    }
