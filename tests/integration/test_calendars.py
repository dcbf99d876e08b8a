"""Business calendars against a real Postgres: a holiday slot is recorded skipped with the
calendar as reason, a moved slot keeps its identity and starts on the next business day,
the claim hands the node the calendar in its row (no statement of its own), changing a
calendar re-plans the next slot of every job that uses it in one transaction, and bad input
writes nothing."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from cluster.errors import Conflict, InvalidInput
from cluster.jobs.spec import JobSpec
from cluster.store.jobstore.store import JobStore
from cluster.timing.calendars import Calendar, parse_dates
from node.handlers.context import Outcome
from node.pipeline.outcomes import after_run
from tests.helpers.cli import Invoke
from tests.helpers.sessions import Opener

ALL = range(16)
T0 = datetime(2031, 12, 23, 10, 0, tzinfo=UTC)  # a Tuesday; the 25th is a Thursday holiday
XMAS = datetime(2031, 12, 25, 9, 0, tzinfo=UTC)
HOLIDAYS = Calendar("office", excluded=parse_dates(["2031-12-25", "2032-01-01"]))


def daily(name: str = "report", calendar: str = "office") -> JobSpec:
    return JobSpec.build(name, "0 9 * * *", "shell:true", calendar=calendar)


def monthly(name: str = "invoice") -> JobSpec:
    return JobSpec.build(
        name, "0 9 25 * *", "shell:true", calendar="office", on_excluded="next-business-day"
    )


async def test_holidays_are_skipped_with_the_calendar_as_reason_and_moves_keep_identity(
    store: JobStore, open_session: Opener
) -> None:
    await store.calendars.put(HOLIDAYS, now=T0)
    await store.definitions.add(daily(), now=T0)
    invoice = await store.definitions.add(monthly(), now=T0)
    assert (invoice.slot_at, invoice.next_run_at) == (XMAS, XMAS + timedelta(days=1))
    node = await open_session("n1")

    (job,) = (await node.claim(ALL, 10, 30.0, now=XMAS - timedelta(days=1))).jobs
    assert job.name == "report" and job.calendar_rule is not None  # planning needs no read
    done, skips = after_run(job, Outcome("succeeded", None, 0.1), XMAS - timedelta(days=1))
    assert done.next_slot == XMAS + timedelta(days=1)
    assert [s.slot for s in skips] == [XMAS] and "2031-12-25 is a holiday" in skips[0].reason
    await node.completions.complete([done], skips, now=XMAS - timedelta(days=1))

    nothing = await node.claim(ALL, 10, 30.0, now=XMAS)
    assert nothing.jobs == [], "nothing runs on the holiday"

    friday = XMAS + timedelta(days=1)
    claimed = sorted((await node.claim(ALL, 10, 30.0, now=friday)).jobs, key=lambda j: j.name)
    assert [(j.name, j.slot) for j in claimed] == [("invoice", XMAS), ("report", friday)]
    finished = [after_run(j, Outcome("succeeded", None, 0.1), friday) for j in claimed]
    for done, skips in finished:
        await node.completions.complete([done], skips, now=friday)
    invoice_runs = (await store.details("invoice"))["recent_runs"]
    assert [(r["scheduled_for"], r["status"], r["origin"]) for r in invoice_runs] == [
        (XMAS.isoformat(), "succeeded", "calendar")
    ]
    report_runs = (await store.details("report"))["recent_runs"]
    # The weekend ahead is recorded skipped by the completion that plans past it.
    assert [(r["scheduled_for"][:10], r["status"]) for r in report_runs] == [
        ("2031-12-28", "skipped"),
        ("2031-12-27", "skipped"),
        ("2031-12-26", "succeeded"),
        ("2031-12-25", "skipped"),
        ("2031-12-24", "succeeded"),
    ]
    assert report_runs[2]["origin"] == "schedule", "a calendar's skips are not catch-up"
    assert "not a business weekday" in (report_runs[0]["error"] or "")
    assert "is a holiday" in (report_runs[3]["error"] or "")


async def test_changing_a_calendar_replans_its_jobs_in_one_transaction(
    store: JobStore, open_session: Opener
) -> None:
    await store.calendars.put(HOLIDAYS, now=T0)
    await store.definitions.add(daily(), now=T0)
    await store.definitions.add(monthly(), now=T0)
    await store.definitions.add(JobSpec.build("plain", "0 9 * * *", "shell:true"), now=T0)
    plain = await store.get("plain")

    # Christmas Eve becomes a holiday, Christmas a working day.
    changed = Calendar("office", excluded=parse_dates(["2031-12-24", "2032-01-01"]))
    result = await store.calendars.put(changed, now=T0)
    assert not result.created and sorted(result.replanned) == ["default/invoice", "default/report"]
    report, invoice = await store.get("report"), await store.get("invoice")
    assert (report.slot_at, report.next_run_at) == (XMAS, XMAS)
    assert (invoice.slot_at, invoice.next_run_at) == (XMAS, XMAS)
    assert await store.get("plain") == plain, "a job without the calendar is untouched"
    assert result.calendar.version == 2

    # A running slot keeps its slot; its completion plans the next one.
    node = await open_session("n1")
    (running,) = [j for j in (await node.claim(ALL, 10, 30.0, now=XMAS)).jobs if j.name == "report"]
    await store.calendars.put(HOLIDAYS, now=XMAS)
    row = await store.get("report")
    assert (row.status, row.slot_at) == ("running", XMAS)
    assert row.calendar_rule is not None and "2031-12-25" in row.calendar_rule

    # A change the jobs cannot live with is refused whole: nothing written.
    weekends = Calendar("office", weekdays=frozenset({5}), excluded=frozenset())
    await store.definitions.add(
        JobSpec.build("weekly", "0 9 * * mon", "shell:true", calendar="office"), now=T0
    )
    with pytest.raises(InvalidInput, match="weekly"):
        await store.calendars.put(weekends, now=T0)
    assert (await store.calendars.get("office")).version == 3
    assert running.slot == XMAS


async def test_bad_calendar_input_writes_nothing(store: JobStore) -> None:
    with pytest.raises(InvalidInput, match="unknown calendar 'nope'"):
        await store.definitions.add(daily(calendar="nope"), now=T0)
    assert await store.jobs() == []
    with pytest.raises(InvalidInput, match="business_day"):
        JobSpec.build("x", "0 9 * * *", "shell:true", calendar="office", business_day=0)
    with pytest.raises(InvalidInput, match="needs a calendar"):
        JobSpec.build("x", "0 9 * * *", "shell:true", on_excluded="next-business-day")
    await store.calendars.put(HOLIDAYS, now=T0)
    await store.definitions.add(daily(), now=T0)
    with pytest.raises(Conflict, match="used by 1 job"):
        await store.calendars.remove("office")
    assert [c.name for c in await store.calendars.list()] == ["office"]


def test_the_cli_refuses_bad_calendars_in_one_line(initialised: Invoke, tmp_path: object) -> None:
    from pathlib import Path

    bad = Path(str(tmp_path)) / "bad.ics"
    bad.write_text("BEGIN:VCALENDAR\nthis is not ics\n")
    for args in (
        ["calendars", "add", "x", "--ics", str(bad)],
        ["calendars", "add", "x", "--dates", "2031-02-30"],
        ["calendars", "add", "x", "--weekdays", "mon-funday"],
        ["jobs", "add", "j", "--schedule", "0 9 * * *", "--handler", "shell:true",
         "--calendar", "missing"],
        ["jobs", "add", "j", "--schedule", "0 9 * * *", "--handler", "shell:true",
         "--calendar", "missing", "--business-day", "0"],
    ):  # fmt: skip
        result = initialised(*args)
        assert result.exit_code == 2, (args, result.output)
        assert len(result.output.strip().splitlines()) == 1, result.output
    listed = initialised("calendars", "list", "--json")
    assert listed.exit_code == 0 and listed.output.strip() == "[]"
    assert initialised("jobs", "list", "--json").output.strip() == "[]"


def test_jobs_show_explains_the_timeline_and_an_outage(initialised: Invoke) -> None:
    assert initialised("calendars", "add", "office", "--dates", "2031-12-25").exit_code == 0
    added = initialised(
        "jobs", "add", "report", "--schedule", "0 9 * * *", "--handler", "shell:true",
        "--calendar", "office", "--tz", "Europe/Berlin",
    )  # fmt: skip
    assert added.exit_code == 0, added.output
    explained = initialised("jobs", "show", "report", "--explain", "--json")
    steps = json.loads(explained.output)
    assert steps and all(set(s) == {"slot", "start", "action", "notes"} for s in steps)
    assert any("Europe/Berlin" in s["notes"][0] for s in steps)
    outage = initialised(
        "jobs", "show", "report", "--outage", "2031-12-24T00:00:00Z..2031-12-26T12:00:00Z"
    )
    assert outage.exit_code == 0, outage.output
    assert "2031-12-25T08:00:00+00:00  skipped" in outage.output
    assert "2031-12-26T08:00:00+00:00  catch-up" in outage.output
    for bad in ("yesterday..today", "2031-12-26T00:00:00Z..2031-12-24T00:00:00Z"):
        refused = initialised("jobs", "show", "report", "--outage", bad)
        assert refused.exit_code == 2 and len(refused.output.strip().splitlines()) == 1
