"""``pause --until`` and ``skip-next`` against a real Postgres: a job paused until a time
is idle with its first slot at or after it, so it resumes by itself; ``skip-next`` records
the next runs skipped (and the calendar's skips on the way) and moves on; a running job,
a past time or a bad count are refused with nothing written."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cluster.errors import Conflict, InvalidInput
from cluster.jobs.spec import JobSpec
from cluster.store.jobstore.store import JobStore
from cluster.timing.calendars import Calendar, parse_dates
from tests.helpers.cli import Invoke
from tests.helpers.sessions import Opener

ALL = range(16)
T0 = datetime(2031, 12, 22, 10, 0, tzinfo=UTC)  # a Monday
NINE = datetime(2031, 12, 23, 9, 0, tzinfo=UTC)  # the first slot after T0


def daily(name: str = "report", calendar: str | None = None) -> JobSpec:
    return JobSpec.build(name, "0 9 * * *", "shell:true", calendar=calendar)


async def test_a_job_paused_until_a_time_resumes_by_itself(
    store: JobStore, open_session: Opener
) -> None:
    await store.definitions.add(daily(), now=T0)
    until = NINE + timedelta(days=2, hours=1)
    await store.holds.pause_until("report", "default", until, now=T0)
    job = await store.get("report")
    assert (job.status, job.paused_until, job.slot_at) == ("idle", until, NINE + timedelta(days=3))
    node = await open_session("n1")
    assert (await node.claim(ALL, 10, 30.0, now=NINE + timedelta(days=2))).jobs == []
    (claimed,) = (await node.claim(ALL, 10, 30.0, now=NINE + timedelta(days=3))).jobs
    assert claimed.slot == NINE + timedelta(days=3)
    await node.release([(claimed.id, claimed.lease_token)], "test")  # idle again

    resumed = await store.resume("report", now=T0)
    assert (resumed.paused_until, resumed.slot_at) == (None, NINE)


async def test_skip_next_records_the_skipped_runs_and_the_calendars(store: JobStore) -> None:
    await store.calendars.put(Calendar("office", excluded=parse_dates(["2031-12-25"])), now=T0)
    await store.definitions.add(daily(calendar="office"), now=T0)
    skipped = await store.holds.skip_next("report", "default", 2, now=T0)
    assert skipped == [NINE, NINE + timedelta(days=1)]
    job = await store.get("report")
    assert job.slot_at == NINE + timedelta(days=3), "the 25th is a holiday"
    runs = {r.scheduled_for: r for r in await store.runs(job="report", tenant="default")}
    assert sorted(runs) == [NINE, NINE + timedelta(days=1), NINE + timedelta(days=2)]
    assert runs[NINE].last_error == "skipped by pulse jobs skip-next"
    assert "is a holiday" in (runs[NINE + timedelta(days=2)].last_error or "")


async def test_holds_refuse_bad_input_and_running_jobs(
    store: JobStore, open_session: Opener
) -> None:
    await store.definitions.add(daily(), now=T0)
    before = await store.get("report")
    with pytest.raises(InvalidInput, match="not in the future"):
        await store.holds.pause_until("report", "default", T0 - timedelta(hours=1), now=T0)
    for count in (0, 1001):
        with pytest.raises(InvalidInput, match="count"):
            await store.holds.skip_next("report", "default", count, now=T0)
    node = await open_session("n1")
    await node.claim(ALL, 10, 30.0, now=NINE)
    with pytest.raises(Conflict, match="running"):
        await store.holds.skip_next("report", "default", 1, now=NINE)
    with pytest.raises(Conflict, match="running"):
        await store.holds.pause_until("report", "default", NINE + timedelta(days=1), now=NINE)
    after = await store.get("report")
    assert (after.slot_at, after.paused_until) == (before.slot_at, None)
    assert [r.status for r in await store.runs(job="report", tenant="default")] == ["running"]


def test_the_cli_refuses_a_bad_until_in_one_line(initialised: Invoke) -> None:
    assert (
        initialised("jobs", "add", "j", "--schedule", "@daily", "--handler", "shell:true").exit_code
        == 0
    )
    for args in (["--until", "tomorrow"], ["--until", "2031-01-01T00:00:00"]):
        result = initialised("jobs", "pause", "j", *args)
        assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    result = initialised("jobs", "skip-next", "j", "--count", "0")
    assert result.exit_code == 2, result.output
    listed = initialised("jobs", "list", "--json")
    assert '"paused_until": null' in listed.output
    held = initialised("jobs", "pause", "j", "--until", "2099-01-01T00:00:00+00:00")
    assert held.exit_code == 0, held.output
    assert "paused until 2099-01-01T00:00:00+00:00" in initialised("jobs", "list").output
