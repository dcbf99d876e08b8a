"""Several schedules per job and ``max_runs`` against a real Postgres: slots claimed in the
union's order, each run with its entry's payload and number, an entry's end honoured,
catch-up over the union, a job done after its ``max_runs``-th run (skips not counted),
``jobs show`` listing each slot's entry, and bad input refused with nothing written."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cluster.errors import Conflict, InvalidInput
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from cluster.store.lock.records import ClaimedJob
from cluster.store.lock.session import LockSession
from cluster.timing.calendars import Calendar
from node.handlers.context import Outcome
from node.pipeline.outcomes import after_run, plan_at_claim
from node.pipeline.runcontext import slot_entry
from tests.helpers.cli import Invoke, assert_bad_input, jobs_rows
from tests.helpers.sessions import Opener

T0 = datetime(2031, 3, 4, tzinfo=UTC)
ALL = range(16)
OK = Outcome("succeeded", None, 0.1)
H = "shell:true"

TWO = [
    {"schedule": "0 9 * * *", "payload": {"part": "morning"}},
    {"schedule": "0 18 * * *", "payload": {"part": "evening"}, "end": "2031-03-05T12:00:00Z"},
]


def job(name: str = "report", **options: Any) -> JobSpec:
    entry = {"name": name, "handler": H, "schedules": TWO, "payload": {"team": "ops"}, **options}
    return JobSpec.from_mapping(entry)


async def run_once(node: LockSession, at: datetime, outcome: Outcome = OK) -> ClaimedJob:
    """Claim the one due job at ``at`` and complete it with ``outcome``."""
    (claimed,) = (await node.claim(ALL, 10, 0.0, now=at)).jobs
    planned = plan_at_claim(claimed, at)
    done, skips = planned if planned is not None else after_run(claimed, outcome, at)
    assert await node.completions.complete([done], skips, now=at)
    return claimed


async def test_the_union_runs_in_order_with_each_entrys_payload(
    store: JobStore, open_session: Opener
) -> None:
    created = await store.definitions.add(job(), now=T0)
    assert created.slot_at == T0 + timedelta(hours=9)
    node = await open_session("n1")
    seen = []
    for at in (T0 + timedelta(hours=9), T0 + timedelta(hours=18), T0 + timedelta(hours=33)):
        claimed = await run_once(node, at)
        seen.append((claimed.slot, *slot_entry(claimed)))
    assert seen == [
        (T0 + timedelta(hours=9), {"team": "ops", "part": "morning"}, 1),
        (T0 + timedelta(hours=18), {"team": "ops", "part": "evening"}, 2),
        # 2031-03-05T18:00 is past the second entry's end: the next slot is the first's.
        (T0 + timedelta(hours=33), {"team": "ops", "part": "morning"}, 1),
    ]
    shown = await store.details("report")
    assert shown["next_slots"][:2] == [(T0 + timedelta(hours=57)).isoformat(),
                                       (T0 + timedelta(hours=81)).isoformat()]  # fmt: skip
    assert shown["next_entries"][:2] == [1, 1]
    assert [e["schedule"] for e in shown["schedules"]] == ["0 9 * * *", "0 18 * * *"]
    assert [r["status"] for r in shown["recent_runs"]] == ["succeeded"] * 3


async def test_catch_up_once_over_the_union_runs_the_newest_missed_slot(
    store: JobStore, open_session: Opener
) -> None:
    await store.definitions.add(job(schedules=["0 9 * * *", "0 18 * * *"]), now=T0)
    node = await open_session("n1")
    back = T0 + timedelta(days=2, hours=20)  # four slots missed: 9, 18, 33, 42 (+ 57 due)
    claimed = await run_once(node, back)  # skipped at claim, moved to the newest
    assert claimed.slot == T0 + timedelta(hours=9)
    newest = await run_once(node, back)
    assert newest.slot == T0 + timedelta(days=2, hours=18)
    runs = await store.runs(job="report", limit=10)
    assert sorted((r.scheduled_for, r.status) for r in runs) == [
        (T0 + timedelta(hours=h), "skipped") for h in (9, 18, 33, 42, 57)
    ] + [(T0 + timedelta(hours=66), "succeeded")]


async def test_max_runs_makes_the_job_done_and_skips_do_not_count(
    store: JobStore, open_session: Opener
) -> None:
    await store.definitions.add(
        JobSpec.build("thrice", "@hourly", H, max_runs=2, catch_up="skip", grace=60), now=T0
    )
    node = await open_session("n1")
    await run_once(node, T0 + timedelta(hours=1))
    # Two hours later: the 02:00 slot is skipped by catch-up (not a run), 03:00 runs.
    await run_once(node, T0 + timedelta(hours=3, seconds=1))
    after_skip = await store.get("thrice")
    assert (after_skip.status, after_skip.runs_done) == ("idle", 1)
    await run_once(node, T0 + timedelta(hours=3, seconds=2))
    done = await store.get("thrice")
    assert (done.status, done.runs_done, done.next_run_at) == ("done", 2, None)
    nothing = await node.claim(ALL, 10, 0.0, now=T0 + timedelta(days=2))
    assert nothing.jobs == []
    statuses = sorted((r.scheduled_for.hour, r.status) for r in await store.runs(job="thrice"))
    assert statuses == [(1, "succeeded"), (2, "skipped"), (3, "succeeded")]
    assert (await store.definitions.apply([JobSpec.build("thrice", "@hourly", H, max_runs=2,
                                             catch_up="skip", grace=60)])).unchanged  # fmt: skip


async def test_a_done_job_refuses_pause_until_and_skip_next_saying_it_is_done(
    store: JobStore, open_session: Opener
) -> None:
    """Before, ``pause --until`` of a done job said it was running and to try again."""
    await store.definitions.add(JobSpec.build("once", "@hourly", H, max_runs=1), now=T0)
    await run_once(await open_session("n1"), T0 + timedelta(hours=1))
    now = T0 + timedelta(hours=1, minutes=10)
    with pytest.raises(Conflict, match="'once' is done: it has no slot left to hold"):
        await store.holds.pause_until("once", "default", now + timedelta(hours=2), now=now)
    with pytest.raises(Conflict, match="'once' is done; skip-next needs it idle"):
        await store.holds.skip_next("once", "default", 1, now=now)
    job = await store.get("once")
    assert (job.status, job.paused_until, job.next_run_at) == ("done", None, None)


@pytest.mark.parametrize("then", ["resume", "apply"])
async def test_a_done_job_applied_paused_stays_done(
    store: JobStore, open_session: Opener, then: str
) -> None:
    """A pause written as a definition (``paused: true``) of a done job, then a resume (or
    the definition without it): the job stays done, as ``pulse jobs pause`` leaves it.
    Before, the apply made it paused and the resume idle, and it ran past its max_runs."""
    await store.definitions.add(JobSpec.build("once", "@hourly", H, max_runs=1), now=T0)
    node = await open_session("n1")
    await run_once(node, T0 + timedelta(hours=1))
    now = T0 + timedelta(hours=1, minutes=10)
    paused = JobSpec.build("once", "@hourly", H, max_runs=1, paused=True)
    assert (await store.definitions.apply([paused], now=now)).updated == ["once"]
    assert (await store.get("once")).status == "done"
    if then == "resume":
        await store.resume("once", now=now)
    else:
        await store.definitions.apply([JobSpec.build("once", "@hourly", H, max_runs=1)], now=now)
    job = await store.get("once")
    assert (job.status, job.runs_done, job.next_run_at) == ("done", 1, None)
    assert (await node.claim(ALL, 10, 30.0, now=T0 + timedelta(days=1))).jobs == []
    runs = await store.runs(job="once")
    assert [(r.scheduled_for, r.status) for r in runs] == [(T0 + timedelta(hours=1), "succeeded")]


async def test_a_trigger_of_a_done_job_runs_once_and_leaves_it_done(
    store: JobStore, open_session: Opener
) -> None:
    """The slot a done job stopped at is past by the time of the trigger. Before, the
    trigger made that slot due: catch-up recorded the slots since skipped and ran the last
    of them as the schedule's, after the job was done. The trigger runs as a flight now,
    stamped with its time, as one with a payload does: the job stays as it was."""
    await store.definitions.add(JobSpec.build("once", "@hourly", H, max_runs=1), now=T0)
    node = await open_session("n1")
    await run_once(node, T0 + timedelta(hours=1))
    before = await store.get("once")
    now = T0 + timedelta(hours=5, minutes=10)
    job = await store.trigger("once", now=now)
    assert (job.status, job.slot_at, job.next_run_at) == ("done", before.slot_at, None)
    assert (await node.claim(ALL, 10, 30.0, now=now)).jobs == []
    (flight,) = await node.flights.claim(ALL, 10, 30.0, now=now)
    assert (flight.slot, flight.origin) == (now, "trigger")
    done, _ = after_run(flight, OK, now)
    await node.completions.complete_flights([done], now=now)
    runs = await store.runs(job="once")
    assert sorted((r.scheduled_for, r.status, r.origin) for r in runs) == [
        (T0 + timedelta(hours=1), "succeeded", "schedule"),
        (now, "succeeded", "trigger"),
    ]
    job = await store.get("once")
    assert (job.status, job.runs_done, job.slot_at, job.next_run_at) == (
        "done",
        2,
        before.slot_at,
        None,
    )


async def fly(node: LockSession, at: datetime) -> None:
    """Claim the one due flight at ``at`` and complete it, succeeded."""
    (flight,) = await node.flights.claim(ALL, 10, 30.0, now=at)
    done, _ = after_run(flight, OK, at)
    assert await node.completions.complete_flights([done], now=at)


@pytest.mark.parametrize("paused", [False, True], ids=["idle", "paused"])
async def test_a_trigger_with_a_payload_counts_toward_max_runs(
    store: JobStore, open_session: Opener, paused: bool
) -> None:
    """A run is a run, whoever asked for it: a trigger with a payload (a flight beside the
    job's own slot) counts as one without does. Before, it counted in the audit's reading
    of ``max_runs`` but not in ``runs_done``, and the job ran ``max_runs`` slots of its own
    besides. The job is done when it ends, its next slot still to come (or paused)."""
    await store.definitions.add(JobSpec.build("capped", "@hourly", H, max_runs=2), now=T0)
    node = await open_session("n1")
    await run_once(node, T0 + timedelta(hours=1))
    now = T0 + timedelta(hours=1, minutes=20)
    if paused:
        await store.pause("capped", now=now)
    await store.inputs.trigger("capped", payload={"x": 1}, now=now)
    await fly(node, now)
    job = await store.get("capped")
    assert (job.status, job.runs_done, job.next_run_at) == ("done", 2, None)
    assert (await node.claim(ALL, 10, 0.0, now=T0 + timedelta(days=1))).jobs == []
    runs = await store.runs(job="capped")
    assert sorted((r.scheduled_for, r.origin) for r in runs) == [
        (T0 + timedelta(hours=1), "schedule"),
        (now, "trigger"),
    ]


async def test_a_trigger_that_reaches_max_runs_leaves_the_slot_due_to_run_then_done(
    store: JobStore, open_session: Opener
) -> None:
    """The job's own slot came while the trigger ran (due, no node took it yet): it is
    not left without a record, it runs, and its end makes the job done."""
    await store.definitions.add(JobSpec.build("capped", "@hourly", H, max_runs=2), now=T0)
    node = await open_session("n1")
    await run_once(node, T0 + timedelta(hours=1))
    await store.inputs.trigger("capped", payload={"x": 1}, now=T0 + timedelta(minutes=70))
    (flight,) = await node.flights.claim(ALL, 10, 3600.0, now=T0 + timedelta(minutes=70))
    ended = T0 + timedelta(hours=2, seconds=5)
    done, _ = after_run(flight, OK, ended)
    assert await node.completions.complete_flights([done], now=ended)
    job = await store.get("capped")
    assert (job.status, job.runs_done, job.slot_at) == ("idle", 2, T0 + timedelta(hours=2))
    await run_once(node, ended)
    job = await store.get("capped")
    assert (job.status, job.runs_done, job.next_run_at) == ("done", 3, None)
    runs = await store.runs(job="capped")
    assert sorted(r.scheduled_for for r in runs) == [
        T0 + timedelta(hours=1), T0 + timedelta(minutes=70), T0 + timedelta(hours=2),
    ]  # fmt: skip


@pytest.mark.parametrize("max_runs", [3, None])
async def test_more_runs_for_a_done_job_run_it_again_from_its_next_slot(
    store: JobStore, open_session: Opener, max_runs: int | None
) -> None:
    """``max_runs`` raised above the runs a done job ran (or unset): it runs from its
    schedule's next slot after the apply, the slots while it was done owed nothing. Before,
    it stayed done: only another schedule made it idle again."""
    await store.definitions.add(JobSpec.build("once", "@hourly", H, max_runs=1), now=T0)
    node = await open_session("n1")
    await run_once(node, T0 + timedelta(hours=1))
    now = T0 + timedelta(hours=3, minutes=10)
    more = JobSpec.build("once", "@hourly", H, max_runs=max_runs)
    assert (await store.definitions.apply([more], now=now)).updated == ["once"]
    job = await store.get("once")
    assert (job.status, job.slot_at, job.runs_done) == ("idle", T0 + timedelta(hours=4), 1)
    for hour in (4, 5):
        await run_once(node, T0 + timedelta(hours=hour))
    job = await store.get("once")
    assert (job.status, job.runs_done) == ("done" if max_runs else "idle", 3)
    runs = await store.runs(job="once")
    assert sorted((r.scheduled_for.hour, r.status) for r in runs) == [
        (1, "succeeded"), (4, "succeeded"), (5, "succeeded"),
    ]  # fmt: skip


async def test_max_runs_lowered_to_the_runs_done_makes_the_job_done_now(
    store: JobStore, open_session: Opener
) -> None:
    """Before, a job given a ``max_runs`` it had reached ran once more. Its slot due by
    the apply (no node took it) is recorded skipped with the apply's reason; a running
    job is done when its run ends."""
    for name in ("due", "running"):
        await store.definitions.add(JobSpec.build(name, "@hourly", H, max_runs=5), now=T0)
    node = await open_session("n1")
    for hour in (1, 2):
        at = T0 + timedelta(hours=hour)
        claimed = (await node.claim(ALL, 10, 0.0, now=at)).jobs
        assert await node.completions.complete(
            [after_run(c, OK, at)[0] for c in claimed], [], now=at
        )
    now = T0 + timedelta(hours=3, minutes=10)
    (held,) = (await node.claim(ALL, 1, 0.0, now=now)).jobs
    lowered = [JobSpec.build(n, "@hourly", H, max_runs=2) for n in ("due", "running")]
    assert sorted((await store.definitions.apply(lowered, now=now)).updated) == ["due", "running"]
    other = "due" if held.name == "running" else "running"
    job = await store.get(other)
    assert (job.status, job.runs_done, job.next_run_at) == ("done", 2, None)
    assert (await store.get(held.name)).status == "running"
    done, skips = after_run(held, OK, now)
    assert await node.completions.complete([done], skips, now=now)
    job = await store.get(held.name)
    assert (job.status, job.runs_done) == ("done", 3)
    assert (await node.claim(ALL, 10, 0.0, now=T0 + timedelta(days=1))).jobs == []
    runs = await store.runs(job=other)
    assert sorted((r.scheduled_for.hour, r.status, r.last_error) for r in runs) == [
        (1, "succeeded", None),
        (2, "succeeded", None),
        (3, "skipped", "skipped by pulse jobs apply: max_runs 2 reached before it ran"),
    ]


async def test_a_plan_says_what_a_new_max_runs_does(store: JobStore, open_session: Opener) -> None:
    """``pulse jobs apply --plan``: lowered to the runs the job ran, it is done and its
    overdue slots are recorded skipped; raised on a done job, it runs again."""
    await store.definitions.add(JobSpec.build("r", "@hourly", H, max_runs=5), now=T0)
    node = await open_session("n1")
    for hour in (1, 2):
        await run_once(node, T0 + timedelta(hours=hour))
    now = T0 + timedelta(hours=4, minutes=10)  # 03:00 and 04:00 due, not run
    lowered = JobSpec.build("r", "@hourly", H, max_runs=2)
    (plan,) = (await store.plans.plan([lowered], now=now)).jobs
    assert (plan.dropped, plan.notes) == (
        2,
        [
            "done: its 2 run(s) reach max_runs 2, no slot runs again; 2 overdue slot(s) since "
            f"{(T0 + timedelta(hours=3)).isoformat()} are recorded skipped"
        ],
    )
    assert (await store.get("r")).status == "idle", "a plan writes nothing"
    await store.definitions.apply([lowered], now=now)
    (plan,) = (await store.plans.plan([JobSpec.build("r", "@hourly", H)], now=now)).jobs
    five = (T0 + timedelta(hours=5)).isoformat()
    assert plan.notes == [f"runs again from {five}: the slots while it was done do not run"]


async def test_max_runs_lowered_while_a_slot_waits_for_its_retry_ends_after_the_retry(
    store: JobStore, open_session: Opener
) -> None:
    """The slot's attempt failed and its retry waits: the job is in that slot, as a running
    one is, and is done when its last attempt ends. Made done at once, the retry never
    ran, and the slot's record kept saying it would ("retry in 30s")."""
    spec = JobSpec.build("r", "@hourly", H, max_runs=5, retries=1, retry_backoff="30s")
    await store.definitions.add(spec, now=T0)
    node = await open_session("n1")
    await run_once(node, T0 + timedelta(hours=1))
    await run_once(node, T0 + timedelta(hours=2), Outcome("failed", "boom", 0.1))
    now = T0 + timedelta(hours=2, seconds=10)
    lowered = JobSpec.build("r", "@hourly", H, max_runs=1, retries=1, retry_backoff="30s")
    await store.definitions.apply([lowered], now=now)
    assert ((job := await store.get("r")).status, job.attempt) == ("idle", 2)
    await run_once(node, T0 + timedelta(hours=2, seconds=40))
    job = await store.get("r")
    assert (job.status, job.runs_done) == ("done", 2)
    runs = await store.runs(job="r")
    assert sorted((r.scheduled_for.hour, r.status, r.attempt) for r in runs) == [
        (1, "succeeded", 1), (2, "succeeded", 2),
    ]  # fmt: skip


@pytest.mark.parametrize("change", ["holiday", "window", "apply"])
async def test_a_done_job_gets_no_record_from_a_calendar_or_window_change(
    store: JobStore, open_session: Opener, change: str
) -> None:
    """A calendar or window change plans the jobs it covers again, and an apply plans the
    job it writes, recording the slots the rule skips on the way: not a done job's, which
    has no slot left. Given more runs, it plans from the apply."""
    await store.calendars.put(Calendar("days", frozenset(range(7)), frozenset()), now=T0)
    done = JobSpec.build("once", "@hourly", H, max_runs=1, calendar="days")
    await store.definitions.add(done, now=T0)
    await run_once(await open_session("n1"), T0 + timedelta(hours=1))
    now = T0 + timedelta(hours=1, minutes=10)  # before the slot it stopped at, 02:00
    holiday = frozenset({now.date()})
    if change == "holiday":
        await store.calendars.put(Calendar("days", frozenset(range(7)), holiday), now=now)
    elif change == "window":
        await store.windows.add(now, now + timedelta(hours=5), job="once", now=now)
    else:
        await store.calendars.put(Calendar("days", frozenset(range(7)), holiday), now=now)
        labelled = JobSpec.build(
            "once", "@hourly", H, max_runs=1, calendar="days", labels={"a": "b"}
        )
        assert (await store.definitions.apply([labelled], now=now)).updated == ["once"]
    assert (await store.get("once")).status == "done"
    runs = await store.runs(job="once")
    assert [(r.scheduled_for, r.status) for r in runs] == [(T0 + timedelta(hours=1), "succeeded")]


async def test_a_retried_slot_counts_once(store: JobStore, open_session: Opener) -> None:
    await store.definitions.add(JobSpec.build("r", "@hourly", H, max_runs=1, retries=1), now=T0)
    node = await open_session("n1")
    failed = Outcome("failed", "boom", 0.1)
    await run_once(node, T0 + timedelta(hours=1), failed)
    retried = await store.get("r")
    assert (retried.status, retried.runs_done, retried.attempt) == ("idle", 0, 2)
    await run_once(node, T0 + timedelta(hours=1, minutes=1), failed)
    assert (await store.get("r")).status == "done"


async def test_the_last_schedule_ending_makes_the_job_done(
    store: JobStore, open_session: Opener
) -> None:
    ends = [{"schedule": "@hourly", "end": (T0 + timedelta(hours=2, minutes=30)).isoformat()}]
    await store.definitions.add(
        JobSpec.from_mapping({"name": "e", "handler": H, "schedules": ends}), now=T0
    )
    node = await open_session("n1")
    await run_once(node, T0 + timedelta(hours=1))
    await run_once(node, T0 + timedelta(hours=2))
    shown = await store.details("e")
    assert (shown["status"], shown["next_slots"]) == ("done", [])


async def test_a_collision_or_an_ended_job_is_refused_with_nothing_written(
    store: JobStore,
) -> None:
    ended = [{"schedule": "@hourly", "end": (T0 + timedelta(hours=1)).isoformat()}]
    with pytest.raises(InvalidInput, match="every schedule ended"):
        await store.definitions.apply(
            [job("fine"), JobSpec.from_mapping({"name": "e", "handler": H, "schedules": ended})],
            now=T0 + timedelta(days=1),
        )
    assert await store.jobs() == []


def test_the_cli_takes_schedule_repeatedly(initialised: Invoke, settings: ClusterSettings) -> None:
    add = initialised("jobs", "add", "twice", "--schedule", "0 9 * * *", "--schedule",
                      "30 17 * * 1-5", "--handler", H, "--max-runs", "10", "--json")  # fmt: skip
    assert add.exit_code == 0, add.stderr
    made = json.loads(add.stdout)
    assert made["max_runs"] == 10 and made["runs_done"] == 0
    assert [e["schedule"] for e in made["schedules"]] == ["0 9 * * *", "30 17 * * 1-5"]
    shown = json.loads(initialised("jobs", "show", "twice", "--json").stdout)
    assert set(shown["next_entries"]) == {1, 2}
    assert "2 schedules" in initialised("jobs", "list").stdout
    text = initialised("jobs", "show", "twice").stdout
    assert "[schedule 1]" in text and "[schedule 2]" in text
    explained = initialised("jobs", "show", "twice", "--explain").stdout
    assert "schedule 2 of 2: 30 17 * * 1-5" in explained
    span = ["--from", "2026-01-01T00:00:00Z", "--to", "2026-01-02T00:00:00Z"]  # a Thursday
    dry = initialised("jobs", "backfill", "twice", *span, "--dry-run")
    assert dry.stdout.splitlines() == ["2026-01-01T09:00:00+00:00", "2026-01-01T17:30:00+00:00"]
    before = jobs_rows(settings)
    assert_bad_input(initialised("jobs", "add", "bad", "--schedule", "@daily", "--schedule",
                                 "nonsense", "--handler", H), "schedule")  # fmt: skip
    assert_bad_input(initialised("jobs", "add", "bad", "--schedule", "@daily",
                                 "--max-runs", "0", "--handler", H), "max_runs")  # fmt: skip
    assert jobs_rows(settings) == before


def test_a_job_file_with_schedules(initialised: Invoke, tmp_path: Any) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text(
        "- name: f\n  handler: shell:true\n  max_runs: 3\n  schedules:\n"
        "    - '0 9 * * *'\n"
        "    - {schedule: '0 9 * * *', payload: {x: 1}}\n"
    )
    refused = initialised("jobs", "apply", str(path))
    assert_bad_input(refused, "file")
    assert "both have the slot" in refused.stderr and "T09:00:00+00:00" in refused.stderr
    path.write_text(
        "- name: f\n  handler: shell:true\n  max_runs: 3\n  schedules:\n"
        "    - '0 9 * * *'\n"
        "    - {schedule: '0 10 * * *', payload: {x: 1}, start: '2030-01-01T00:00:00Z'}\n"
    )
    applied = initialised("jobs", "apply", str(path), "--json")
    assert json.loads(applied.stdout)["created"] == ["f"], applied.stderr
    again = initialised("jobs", "apply", str(path), "--json")
    assert json.loads(again.stdout)["unchanged"] == ["f"]
