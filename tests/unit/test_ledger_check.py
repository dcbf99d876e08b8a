"""The ledger checker of the model-based test (tests/helpers/ledger.py) on rows made up here:
it finds a slot with no record, a skip without a reason (or a watched slot an action skipped
once its ping was late), a terminal record overwritten or
gone, a slot run while its job was quiet, and a wait without a bound; and it accepts what
the ledger allows (a quiet spell, a slot asked for again, a failed attempt whose retry
waits, a chained job's queued slot)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from cluster.timing.schedule import parse_schedule
from tests.helpers.ledger import Ledger, Timeline

T0 = datetime(2030, 1, 1, tzinfo=UTC)
NEVER = datetime.fromisoformat("9999-01-01T00:00:00+00:00")


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def job(name: str, slot: float, **kw: Any) -> dict[str, Any]:
    row = {
        "id": name,
        "name": name,
        "status": "idle",
        "attempt": 1,
        "slot_at": at(slot),
        "next_run_at": at(slot),
        "schedule": "@every 1m",
        "watch": False,
        "timeout_s": 60.0,
    }
    return row | kw


def run(name: str, minute: float, status: str = "succeeded", **kw: Any) -> dict[str, Any]:
    row = {
        "job_id": name,
        "job_name": name,
        "scheduled_for": at(minute),
        "status": status,
        "origin": "schedule",
        "last_error": None,
        "finished_at": at(minute),
        "started_at": at(minute),
    }
    return row | kw


def every_minute(**kw: Any) -> Timeline:
    return Timeline(T0, [(T0, parse_schedule("@every 1m"))], **kw)


def test_every_expected_slot_needs_a_record_but_a_quiet_spell() -> None:
    lines = {"a": every_minute(quiet=[[at(2.5), at(4.5)]])}
    jobs = {"a": job("a", 6)}
    runs = [run("a", 1), run("a", 2), run("a", 5, "skipped", last_error="skipped by skip-next")]
    assert Ledger().check(jobs, runs, [], lines, at(5.5)) == []
    found = Ledger().check(jobs, runs[1:], [], lines, at(5.5))
    assert found == [f"a: slot {at(1).isoformat()} has no record"]
    unexplained = [*runs[:2], run("a", 5, "skipped")]
    assert Ledger().check(jobs, unexplained, [], lines, at(5.5)) == [
        f"a: slot {at(5).isoformat()} skipped without a reason"
    ]


def test_a_terminal_record_is_never_overwritten_unless_asked_again() -> None:
    ledger, lines, jobs = Ledger(), {"a": every_minute()}, {"a": job("a", 3)}
    assert ledger.check(jobs, [run("a", 1, "failed"), run("a", 2)], [], lines, at(2.5)) == []
    rerun = [run("a", 1, "succeeded", origin="rerun"), run("a", 2)]
    assert ledger.check(jobs, rerun, [], lines, at(2.5)) == [
        f"a: the failed record of {at(1).isoformat()} was overwritten: now succeeded (rerun)"
    ]
    ledger = Ledger()
    ledger.check(jobs, [run("a", 1, "failed"), run("a", 2)], [], lines, at(2.5))
    ledger.ask("a", [at(1)])  # one ask, one rewrite
    assert ledger.check(jobs, rerun, [], lines, at(2.5)) == []
    again = [run("a", 1, "failed", origin="rerun"), run("a", 2)]
    assert ledger.check(jobs, again, [], lines, at(2.5)) == [
        f"a: the succeeded record of {at(1).isoformat()} was overwritten: now failed (rerun)"
    ]
    rewritten = [*again[:1], run("a", 2, "failed")]
    assert ledger.check(jobs, rewritten, [], lines, at(2.5)) == [
        f"a: the succeeded record of {at(2).isoformat()} was overwritten: now failed (schedule)"
    ]
    assert any("is gone" in f for f in ledger.check(jobs, rewritten[:1], [], lines, at(2.5)))


def test_a_failed_attempt_is_terminal_once_no_retry_waits_for_its_slot() -> None:
    lines = {"a": every_minute()}
    retrying = {"a": job("a", 1, attempt=2, next_run_at=at(1.5))}
    ledger = Ledger()
    assert ledger.check(retrying, [run("a", 1, "failed")], [], lines, at(1.2)) == []
    assert ledger.check({"a": job("a", 2)}, [run("a", 1)], [], lines, at(1.7)) == []
    # A triggered slot's retry waits in its flight, the job at its own next slot.
    flight = {"job_id": "a", "slot": at(1.2), "attempt": 2}
    failed = [run("a", 1), run("a", 1.2, "failed", origin="trigger")]
    assert ledger.check({"a": job("a", 2)}, failed, [], lines, at(1.7), flights=[flight]) == []
    retried = [run("a", 1), run("a", 1.2, origin="trigger")]
    assert ledger.check({"a": job("a", 2)}, retried, [], lines, at(1.8)) == []
    # With no retry waiting, the failed record is the slot's for good.
    ledger.check({"a": job("a", 3)}, [*retried, run("a", 2, "failed")], [], lines, at(2.5))
    overwritten = [*retried, run("a", 2)]
    assert ledger.check({"a": job("a", 3)}, overwritten, [], lines, at(2.6)) == [
        f"a: the failed record of {at(2).isoformat()} was overwritten: now succeeded (schedule)"
    ]


def test_no_wait_without_a_bound() -> None:
    lines = {"a": every_minute(), "c": Timeline(T0, upstreams=("a",))}
    chained = job("c", 0, schedule="@after:a", next_run_at=NEVER)
    runs = [run("a", 1)]
    # c waits for a's next success with nothing queued: no slot waits.
    jobs = {"a": job("a", 2), "c": chained | {"slot_at": at(1)}}
    assert Ledger().check(jobs, runs, [], lines, at(1.5)) == []
    # a's success queued for c: fine while queued, a fault once c sits at the marker.
    queued = [{"job_id": "c", "slot": at(1), "taken": False}]
    assert Ledger().check(jobs, runs, queued, lines, at(1.5)) == [
        f"c: waits at {NEVER.isoformat()} (no bound)"
    ]
    # A success that made no slot at all.
    assert Ledger().check({**jobs, "c": chained}, runs, [], lines, at(1.5)) == [
        f"c: a's success of {at(1).isoformat()} made no slot"
    ]
    due = {"a": job("a", 2), "c": chained | {"slot_at": at(1)}}
    assert Ledger().check(due, runs, [], lines, at(2.5)) == [
        f"a: due at {at(2).isoformat()}, left unclaimed by the pass"
    ]


def test_a_gate_skip_says_what_is_true_of_the_upstreams_slot() -> None:
    lines = {"a": every_minute(), "b": every_minute()}
    jobs = {"a": job("a", 2), "b": job("b", 2)}
    said = "upstream a's slot 2030-01-01T00:01:00Z failed"
    runs = [run("a", 1, "failed"), run("b", 1, "skipped", last_error=said)]
    assert Ledger().check(jobs, runs, [], lines, at(1.5)) == []
    retried = [run("a", 1, "succeeded"), run("b", 1, "skipped", last_error=said)]
    assert Ledger().check(jobs, retried, [], lines, at(1.5)) == [
        f"b: slot {at(1).isoformat()} skipped as '{said}', but that slot is succeeded"
    ]
    ledger = Ledger()  # a rerun of a's slot later makes the old reason no lie
    ledger.check(jobs, runs, [], lines, at(1.5))
    ledger.ask("a", [at(1)])
    rerun = [run("a", 1, "succeeded", origin="rerun"), runs[1]]
    assert ledger.check(jobs, rerun, [], lines, at(1.7)) == []


def test_no_slot_its_timing_made_runs_while_the_job_is_quiet() -> None:
    lines = {"a": every_minute(quiet=[[at(2.5), None]])}
    jobs = {"a": job("a", 9, status="paused")}
    ahead = run("a", 3, "skipped", origin=None, last_error="skipped by pulse jobs skip-next")
    triggered = run("a", 3.25, origin="trigger")  # an extra run, on no slot
    runs = [run("a", 1, origin=None), run("a", 2, origin=None), ahead, triggered]
    assert Ledger().check(jobs, runs, [], lines, at(5.5)) == []
    ran = run("a", 4, origin="catch-up")
    found = Ledger().check(jobs, [*runs, ran], [], lines, at(5.5))
    assert found == [f"a: slot {at(4).isoformat()} ran while the job was quiet"]


def test_a_watched_slot_an_action_skipped_once_it_was_late_is_a_missed_ping() -> None:
    """Past the watch job's late_after (20 s), a pause's skip hides a missed ping; within
    it, or on a slot Pulse runs since the job's adoption, a skip is the pause's to write."""
    paused = "skipped by pulse jobs pause: paused before it ran"
    jobs = {"w": job("w", 5, watch=True, late_after_s=20.0, adopt_at=None)}

    def skipped(minute: float, when: float) -> dict[str, Any]:
        return run("w", minute, "skipped", origin=None, last_error=paused, finished_at=at(when))

    lines = {"w": every_minute()}
    runs = [run("w", m, origin="ping") for m in (1, 2)] + [skipped(3, 4.2), skipped(4, 4.2)]
    assert Ledger().check(jobs, runs, [], lines, at(4.2)) == [
        f"w: slot {at(3).isoformat()} was late when '{paused}' recorded it"
    ]
    adopted = {"w": jobs["w"] | {"watch": False, "adopt_at": at(3)}}
    assert Ledger().check(adopted, runs, [], lines, at(4.2)) == []
