"""The slot ledger's classification, pure: expected slots from a job's definitions over
time (cluster/jobs/spans.py), merged with its records, one verdict per slot
(cluster/jobs/ledger.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from cluster.jobs.ledger import (
    Coalesced,
    Job,
    Line,
    Prior,
    Record,
    Summary,
    audit_job,
)
from cluster.jobs.spans import spans_of

T0 = datetime(2026, 3, 2, tzinfo=UTC)
END = T0 + timedelta(minutes=10)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def definition(schedule: str = "@every 1m", **kw: Any) -> dict[str, Any]:
    return {"schedule": schedule, "tz": "UTC", "paused": False, **kw}


def job(*revisions: tuple[float, str, dict[str, Any]], **kw: Any) -> Job:
    spans = spans_of([(at(m), change, d) for m, change, d in revisions])
    return Job("t", "j", spans, **kw)


EVERY_MINUTE = job((-0.5, "created", definition()))


def run(minute: float, status: str = "succeeded", attempt: int = 1, **kw: Any) -> Record:
    return Record(at(minute), status, attempt, kw.pop("node", "n1"), kw.pop("token", 7), **kw)


def prior(status: str, attempt: int = 1, node: str = "n1", **kw: Any) -> Prior:
    fields: dict[str, Any] = {"token": 6, "error": None, "origin": None, "replaced_at": at(9)}
    return Prior(status, attempt, node, **{**fields, **kw})


def audit(j: Job, records: list[Record], cutoff: datetime = END) -> list[Line]:
    """The lines of ``[T0, END)``, or of ``[T0, cutoff)`` when the cutoff is earlier (an
    audit's end is never past its time)."""
    return list(audit_job(j, records, T0, min(END, cutoff), cutoff))


def verdicts(lines: list[Line]) -> list[tuple[float, str]]:
    return [((line.slot - T0).total_seconds() / 60, line.verdict) for line in lines]


def test_every_slot_recorded_is_ran_or_skipped() -> None:
    records = [run(m) for m in range(10)]
    records[3] = run(3, "skipped", error="missed by 2m (catch-up once)")
    lines = audit(EVERY_MINUTE, records)
    assert verdicts(lines) == [(m, "skipped" if m == 3 else "ran") for m in range(10)]
    assert lines[3].detail == "missed by 2m (catch-up once)"
    assert (lines[0].outcome, lines[0].node, lines[0].attempts, lines[0].token) == (
        "succeeded", "n1", 1, 7
    )  # fmt: skip
    summary = Summary()
    for line in lines:
        summary.add(line)
    assert not summary.failing and summary.total("ran") == 9


def test_a_slot_without_record_is_missing_unless_due_within_the_grace() -> None:
    lines = list(audit_job(EVERY_MINUTE, [run(0), run(2)], T0, END, at(8)))
    assert verdicts(lines) == [
        (0, "ran"), (1, "missing"), (2, "ran"), *((m, "missing") for m in range(3, 8)),
        (8, "pending"), (9, "pending"),
    ]  # fmt: skip
    summary = Summary()
    for line in lines:
        summary.add(line)
    assert summary.failing and summary.total("missing") == 6


def test_slots_a_skipped_record_stands_for_are_skipped_not_missing() -> None:
    """A long outage lists the newest slots it passes; the oldest listed record stands for
    the slots from ``since`` up to its own, which have no row (runs.skipped_from)."""
    why = "missed by 9m (catch-up once); 4 older slots, from ..., were skipped too"
    stands = Coalesced(at(2), at(6), why)
    records = [run(m, "skipped", error="missed") for m in (6, 7, 8)] + [run(9)]
    # A re-run asked for one of the unlisted slots has a row of its own, judged by it.
    records.insert(0, run(4, origin="rerun"))
    lines = audit(job((-0.5, "created", definition()), coalesced=(stands,)), records)
    assert verdicts(lines) == [
        (0, "missing"), (1, "missing"), (2, "skipped"), (3, "skipped"), (4, "ran"),
        (5, "skipped"), (6, "skipped"), (7, "skipped"), (8, "skipped"), (9, "ran"),
    ]  # fmt: skip
    assert lines[2].outcome == "skipped"
    assert lines[2].detail == f"{why} (listed under {at(6).isoformat()})"


def test_slots_retention_may_have_pruned_are_pruned_not_missing() -> None:
    """Before ``kept_from``, a slot without a record is `pruned`; a stand-in record, the
    grace and a record of its own still decide first."""
    stand_in = Coalesced(at(0), at(2), "missed (catch-up once)")
    j = job((-0.5, "created", definition()), kept_from=at(6), kept_by="keep_runs 3",
            coalesced=(stand_in,))  # fmt: skip
    lines = list(audit_job(j, [run(2, "skipped"), run(3)], T0, at(6), cutoff=at(4.5)))
    assert verdicts(lines) == [
        (0, "skipped"), (1, "skipped"), (2, "skipped"), (3, "ran"), (4, "pruned"),
        (5, "pending"),
    ]  # fmt: skip
    assert lines[4].detail == (
        "no record, older than the job's retention keeps (keep_runs 3): pruned, or never written"
    )
    assert verdicts(audit(j, [run(6)]))[-4:] == [(6, "ran"), (7, "missing"), (8, "missing"),
                                                 (9, "missing")]  # fmt: skip


def test_in_flight_and_held_slots_are_not_missing() -> None:
    held = Job("t", "j", EVERY_MINUTE.spans, position=at(2), waiting=True,
               in_flight=frozenset({at(1)}))  # fmt: skip
    assert verdicts(audit(held, [run(0)], cutoff=at(3))) == [
        (0, "ran"), (1, "running"), (2, "waiting"),
    ]  # fmt: skip


def test_slots_behind_a_held_or_running_slot_wait_for_it() -> None:
    """A job held at its gate (or whose run of its slot goes on) decides the slots after it
    when it moves on: until then they wait, as a job's own current slot does."""
    held = Job("t", "j", EVERY_MINUTE.spans, position=at(2), waiting=True)
    assert verdicts(audit(held, [run(0), run(1)], cutoff=at(6))) == [
        (0, "ran"), (1, "ran"), (2, "waiting"), (3, "waiting"), (4, "waiting"), (5, "waiting"),
    ]  # fmt: skip
    assert audit(held, [], cutoff=at(6))[4].detail == (
        "behind the job's held or running slot: decided after it"
    )
    running = Job("t", "j", EVERY_MINUTE.spans, position=at(2), in_flight=frozenset({at(2)}))
    assert verdicts(audit(running, [run(0), run(1)], cutoff=at(4)))[2:] == [
        (2, "running"), (3, "waiting"),
    ]  # fmt: skip
    # A current slot that is neither held nor running is overdue: it and those after it
    # are missing (no node took it).
    stuck = Job("t", "j", EVERY_MINUTE.spans, position=at(2))
    assert verdicts(audit(stuck, [run(0), run(1)], cutoff=at(4)))[2:] == [
        (2, "missing"), (3, "missing"),
    ]  # fmt: skip


def test_an_edit_expects_the_new_definitions_slots_from_its_time() -> None:
    edited = job(
        (-0.5, "created", definition()),
        (3.5, "updated", definition("@every 2m")),
        (6.5, "updated", definition("@every 2m", paused=True)),
        (8.5, "updated", definition("@every 2m")),
    )
    slots = [line.slot for line in audit(edited, [])]
    # Every minute until 3.5, every 2 minutes until the pause at 6.5, then after 8.5.
    assert slots == [at(m) for m in (0, 1, 2, 3, 4, 6)]


def held_revisions(until: str) -> list[tuple[float, str, dict[str, Any]]]:
    """Made before the audit's range, paused at 1.5 until ``until``."""
    return [(-0.5, "created", definition()), (1.5, "updated", definition(paused_until=until))]


def test_slots_a_pause_until_passed_over_are_paused_until_the_time_or_a_resume() -> None:
    until = at(6).isoformat()  # as a revision's JSON holds it
    held = job(*held_revisions(until))
    lines = audit(held, [run(0), run(1), run(2, "skipped"), run(6)], cutoff=at(7))
    # A slot recorded anyway keeps its record's verdict; the pause ends at its time.
    assert verdicts(lines) == [
        (0, "ran"), (1, "ran"), (2, "skipped"), (3, "paused"), (4, "paused"), (5, "paused"),
        (6, "ran"),
    ]  # fmt: skip
    assert lines[3].detail == f"passed over by pause --until {until}"
    resumed = job(*held_revisions(until), (3.5, "updated", definition()))
    assert verdicts(audit(resumed, [], cutoff=at(5))) == [
        (0, "missing"), (1, "missing"), (2, "paused"), (3, "paused"), (4, "missing"),
    ]  # fmt: skip


def test_slots_before_the_job_existed_or_after_it_was_removed_are_not_expected() -> None:
    removed = job((4.5, "created", definition()), (7.5, "removed", definition()))
    assert [line.slot for line in audit(removed, [])] == [at(5), at(6), at(7)]


def test_a_chained_job_expects_its_released_slots_and_a_done_job_nothing_after() -> None:
    chained = job((-1, "created", definition("@after:up")), chained=(at(2), at(5)))
    assert verdicts(audit(chained, [run(2)])) == [(2, "ran"), (5, "missing")]
    done = job((-1, "created", definition("@every 1m")), done_after=at(2))
    assert verdicts(audit(done, [run(0), run(1), run(2)])) == [(0, "ran"), (1, "ran"), (2, "ran")]
    # Made done at 4.5 by an apply (max_runs lowered to its runs), which recorded the slots
    # it owed then, after its last run: on their slots, not `unaligned`.
    owed = [run(3, "skipped", error="skipped by pulse jobs apply: max_runs 3 reached")]
    lines = audit(done, [run(0), run(1), run(2), *owed, run(4, "skipped")])
    assert verdicts(lines) == [(0, "ran"), (1, "ran"), (2, "ran"), (3, "skipped"), (4, "skipped")]


def test_a_job_done_after_its_max_runs_expects_nothing_until_a_new_timing_then_one_run() -> None:
    """A job done after two runs (at 0 and 1), given another schedule at 3.5 (idle again),
    runs once more (at 4) and is done again, until another schedule at 7.5: the audit
    read it as done only while it was done now, and called the slots of a done spell it
    had left since missing. Skipped slots and re-runs do not count."""
    j = job(
        (-0.5, "created", definition(max_runs=2)),
        (3.5, "updated", definition("@every 2m", max_runs=2)),
        (5.5, "updated", definition("@every 2m", max_runs=2, retries=1)),  # the same timing
        (7.5, "updated", definition(max_runs=2)),
    )
    records = [run(0), run(1), run(2, "skipped"), run(4), run(5.5, origin="trigger"), run(8)]
    assert verdicts(audit(j, records)) == [
        (0, "ran"), (1, "ran"), (2, "skipped"), (4, "ran"), (5.5, "unaligned"), (8, "ran"),
    ]  # fmt: skip
    rerun = [run(0), run(1, origin="backfill"), run(4)]
    assert verdicts(audit(j, rerun, cutoff=at(9)))[:5] == [
        (0, "ran"), (1, "ran"), (2, "missing"), (3, "missing"), (4, "ran"),
    ]  # fmt: skip


def test_an_audit_from_the_middle_of_a_jobs_history_counts_its_runs_before() -> None:
    """The job done after two runs (at 0 and 1) audited from 0.5: its run at 0 is before
    the range, and the audit counted only those it read, so it called the slots of its
    done spell (2 and 3, before a new schedule at 3.5) missing. The runs before the range
    that count (``ran_before``, ``audit_ran_before``) start the count."""
    revisions = (
        (-0.5, "created", definition(max_runs=2)),
        (3.5, "updated", definition("@every 2m", max_runs=2)),
    )
    records = [run(1), run(4)]

    def lines(j: Job) -> list[tuple[float, str]]:
        return verdicts(list(audit_job(j, records, at(0.5), at(9), at(9))))

    assert (2, "missing") in lines(job(*revisions))
    counted = job(*revisions, ran_before=1, last_ran_before=at(0))
    assert lines(counted) == [(1, "ran"), (4, "ran")]


def test_a_job_given_more_runs_expects_its_slots_from_then_and_one_given_fewer_none() -> None:
    """max_runs raised on a job done after two runs (at 0 and 1): its slots after the
    apply at 3.5 are expected, not those while it was done; lowered at 5.5 to the runs it
    ran: none after (upsert_jobs makes it done then)."""
    j = job(
        (-0.5, "created", definition(max_runs=2)),
        (3.5, "updated", definition(max_runs=5)),
        (5.5, "updated", definition(max_runs=4)),
    )
    records = [run(0), run(1), run(4), run(5)]
    assert verdicts(audit(j, records, cutoff=at(9))) == [
        (0, "ran"),
        (1, "ran"),
        (4, "ran"),
        (5, "ran"),
    ]


def test_records_on_no_expected_slot_are_unaligned() -> None:
    trigger = run(2.25, origin="trigger")
    lines = audit(EVERY_MINUTE, [run(0), run(1), run(2), trigger], cutoff=at(3))
    assert verdicts(lines)[3] == (2.25, "unaligned")
    assert lines[3].detail == "a trigger: not a slot"


def test_a_slot_skipped_ahead_and_then_paused_over_keeps_its_records_verdict() -> None:
    """``skip-next`` records the job's next slots before their time; a pause that follows
    leaves them on no expected slot, but they were the job's slots when recorded."""
    paused = job(
        (-0.5, "created", definition("@every 2m")),
        (3.5, "updated", definition("@every 2m", paused=True)),
        (7.5, "updated", definition("@every 2m")),
    )
    ahead = run(4, "skipped", error="skipped: skip-next")
    ran = run(6)  # a run of a slot the pause passed over is still on no slot
    off = run(5, "skipped", error="not a slot of the schedule")
    lines = audit(paused, [run(0), run(2), ahead, off, ran, run(8)], cutoff=at(9))
    assert verdicts(lines) == [
        (0, "ran"), (2, "ran"), (4, "skipped"), (5, "unaligned"), (6, "unaligned"), (8, "ran"),
    ]  # fmt: skip
    assert lines[2].detail == "skipped: skip-next"


def test_retries_and_reruns_are_named() -> None:
    row = run(
        0,
        attempt=3,
        node="n2",
        priors=(prior("failed", 1), prior("lost", 2, error="owner gone (node n1)")),
    )
    (line,) = audit(EVERY_MINUTE, [row], cutoff=at(0.5))
    assert line.verdict == "reran"
    assert line.detail == (
        "attempt 1 failed on n1: retried; attempt 2 lost on n1 (owner gone (node n1)): "
        "re-run after node death; attempt 3 succeeded on n2"
    )
    asked = run(0, origin="rerun", priors=(prior("succeeded"),))
    (line,) = audit(EVERY_MINUTE, [asked], cutoff=at(0.5))
    assert (line.verdict, line.detail) == (
        "reran", "attempt 1 succeeded on n1: re-run asked (rerun); attempt 1 succeeded on n1"
    )  # fmt: skip
    unrecorded = run(0, attempt=2)
    (line,) = audit(EVERY_MINUTE, [unrecorded], cutoff=at(0.5))
    assert (line.verdict, line.detail) == (
        "reran", "1 earlier attempt(s), not recorded; attempt 2 succeeded on n1"
    )  # fmt: skip


def test_a_final_record_replaced_is_overwritten() -> None:
    cases = [
        run(0, priors=(prior("skipped", error="skipped by pulse jobs skip-next"),)),
        run(0, "failed", priors=(prior("succeeded"),)),
        run(0, "succeeded", priors=(prior("failed", 1),)),  # the same attempt, not a retry
        run(0, "succeeded", 2, priors=(prior("cancelled", 1),)),
    ]
    for row in cases:
        (line,) = audit(EVERY_MINUTE, [row], cutoff=at(0.5))
        assert line.verdict == "overwritten", row
    (line,) = audit(EVERY_MINUTE, [cases[0]], cutoff=at(0.5))
    assert line.detail == (
        "was skipped (skipped by pulse jobs skip-next), attempt 1, until "
        f"{at(9).isoformat()}; now succeeded, attempt 1"
    )
    # Neither a watch run's end nor a poison slot's lost attempt ending failed is one.
    for row in (
        run(0, priors=(prior("running"),)),
        run(0, "failed", priors=(prior("lost", 1),)),
    ):
        (line,) = audit(EVERY_MINUTE, [row], cutoff=at(0.5))
        assert line.verdict != "overwritten", row
