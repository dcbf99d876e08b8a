"""The chaos checker on hand-made observations: what counts as a violation, a loss, a re-run,
a gap and an unheld shard, the named checks of job kinds (exactly-once effects, allow slots,
zone placement); plus the
seeded fault plan and workload (all pure)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from cluster.chaos.plan import KINDS, STALL_NOTICE_S, Bounds, make_plan, parse_kinds
from cluster.chaos.verdict.failover import fault_gaps, unheld_stretches
from cluster.chaos.verdict.kinds import (
    allow_lateness_s,
    allow_slots,
    exactly_once_effects,
    replace_lateness_s,
    replace_slots,
    run_checks,
    zone_placement,
)
from cluster.chaos.verdict.observations import (
    AuditFinding,
    Execution,
    FaultRecord,
    JobInfo,
    LedgerRow,
    LockSample,
    Observations,
    RunRecord,
    count_log_events,
    from_json,
    to_json,
)
from cluster.chaos.verdict.report import build_report, render_table
from cluster.chaos.verdict.safety import check_executions, expected_slots, find_lost, find_reruns
from cluster.chaos.witness import read_witness
from cluster.chaos.workload import make_workload
from cluster.errors import InvalidInput
from tests.helpers import observations
from tests.helpers.observations import T0  # a whole second; the jobs fire on whole seconds

JOB = JobInfo("job", interval_s=1, catch_up="once", sleep_s=0.0, shard=0)
LONG = JobInfo("long", interval_s=10, catch_up="once", sleep_s=7.0, shard=1)


def ms(seconds: float) -> int:
    return round(seconds * 1000)


def ok_run(job: str, slot: float, node: str = "n1", attempt: int = 1) -> RunRecord:
    return RunRecord(job, ms(slot), attempt, node, "succeeded", slot + 0.5)


def ran(job: str, slot: float, node: str = "n1", attempt: int = 1, at: float | None = None):
    return Execution(job, ms(slot), attempt, node, slot + 0.01 if at is None else at)


def steady(job: str, start: float, end: float, step: int = 1, node: str = "n1"):
    """Runs rows and witness lines of a job that fired every slot in [start, end]."""
    slots = [start + i * step for i in range(int((end - start) // step) + 1)]
    return [ok_run(job, s, node) for s in slots], [ran(job, s, node) for s in slots]


def observe(
    runs: Sequence[RunRecord] = (),
    executions: Sequence[Execution] = (),
    faults: Sequence[FaultRecord] = (),
    samples: Sequence[LockSample] = (),
    jobs: Sequence[JobInfo] = (JOB,),
    window: tuple[float, float] = (T0, T0 + 9),
) -> Observations:
    assert window[0] == T0
    return observations.observe(
        jobs=jobs,
        runs=runs,
        executions=executions,
        samples=samples,
        faults=faults,
        window_s=window[1] - T0,
    )


def kill(node: str = "n1", at: float = T0 + 3.2, bound: float = 5.0) -> FaultRecord:
    return FaultRecord("sigkill", node, (node,), at, at + 4.0, bound)


# -- safety -----------------------------------------------------------------------------


def test_a_clean_run_has_no_violations_and_no_loss() -> None:
    runs, execs = steady("job", T0, T0 + 9)
    obs = observe(runs, execs)
    assert check_executions(obs) == []
    assert find_lost(obs) == (10, [])
    assert find_reruns(obs) == []


def test_expected_slots_are_multiples_of_the_interval_inside_the_window() -> None:
    job = JobInfo("j", interval_s=5, catch_up="once", sleep_s=0, shard=0)
    assert expected_slots(job, T0 + 0.5, T0 + 15) == [ms(T0 + 5), ms(T0 + 10), ms(T0 + 15)]
    assert expected_slots(job, T0 + 1, T0 + 4) == []


def test_skipped_slots_are_accounted_and_missing_or_lost_ones_are_not() -> None:
    runs, execs = steady("job", T0, T0 + 9)
    runs[2] = RunRecord("job", ms(T0 + 2), 1, "n1", "skipped", T0 + 3)
    runs[3] = RunRecord("job", ms(T0 + 3), 2, None, "lost", T0 + 4)
    del runs[4]
    expected, lost = find_lost(observe(runs, [e for e in execs if e.slot_ms != ms(T0 + 2)]))
    assert expected == 10
    assert [(v.slot_ms, v.detail) for v in lost] == [
        (ms(T0 + 3), "left lost (attempt 2)"),
        (ms(T0 + 4), "no run row"),
    ]


def test_the_same_attempt_executed_twice_is_a_double_execution() -> None:
    runs, execs = steady("job", T0, T0 + 9)
    execs.append(ran("job", T0 + 5, node="n2"))
    kinds = [v.kind for v in check_executions(observe(runs, execs))]
    assert kinds == ["double execution", "claim mismatch"]


def test_executions_the_runs_table_cannot_explain_are_violations() -> None:
    runs, execs = steady("job", T0, T0 + 9)
    execs.append(ran("job", T0 + 20))  # no claim at all
    execs.append(ran("job", T0 + 1, attempt=2))  # an attempt the table never reached
    runs.append(ok_run("job", T0 + 30))  # succeeded without running
    execs.append(ran("job", T0 + 40, at=T0 + 39.5))  # before its slot
    runs.append(ok_run("job", T0 + 40))
    kinds = sorted(v.kind for v in check_executions(observe(runs, execs)))
    assert kinds == [
        "completion without execution",
        "early fire",
        "execution without a claim",
        "unknown attempt",
    ]


def test_a_rerun_after_a_kill_is_attributed_to_it_and_one_without_a_fault_is_not() -> None:
    runs, execs = steady("job", T0, T0 + 9)
    runs[3] = ok_run("job", T0 + 3, node="n2", attempt=2)
    execs[3] = ran("job", T0 + 3, node="n1")
    execs.append(ran("job", T0 + 3, node="n2", attempt=2, at=T0 + 5.5))
    reruns = find_reruns(observe(runs, execs, faults=[kill()]))
    assert [(r.slot_ms, r.attempts, r.nodes, r.fault) for r in reruns] == [
        (ms(T0 + 3), (1, 2), ("n1", "n2"), 0)
    ]
    blamed_elsewhere = find_reruns(observe(runs, execs, faults=[kill(node="n3")]))
    assert blamed_elsewhere[0].fault is None
    report = build_report(observe(runs, execs, faults=[kill(node="n3")]), {})
    assert [v.kind for v in report.violations] == ["re-run without a fault"]
    assert not report.passed


# -- failover ---------------------------------------------------------------------------


def test_gap_runs_from_the_fault_when_the_run_in_flight_was_lost() -> None:
    fault = kill(at=T0 + 3.0)
    execs = [ran("long", T0, node="n1"), ran("long", T0, node="n2", attempt=2, at=T0 + 6.5)]
    runs = [ok_run("long", T0, node="n2", attempt=2)]
    samples = [LockSample(T0 + 2.9, {0: "n2", 1: "n1"})]
    obs = observe(runs, execs, [fault], samples, jobs=(JOB, LONG))
    (gap,) = fault_gaps(obs)
    assert (gap.affected, gap.job) == (1, "long")
    assert gap.gap_s == pytest.approx(3.5)


def test_gap_runs_from_the_next_slot_when_nothing_was_lost() -> None:
    runs, execs = steady("job", T0, T0 + 9)
    execs = [e for e in execs if not T0 + 4 <= e.slot_ms / 1000 <= T0 + 6]
    execs += [ran("job", T0 + s, at=T0 + 6.2) for s in (4, 5, 6)]  # late, all at once
    samples = [LockSample(T0 + 3.1, {0: "n1", 1: "n2"})]
    (gap,) = fault_gaps(observe(runs, execs, [kill(at=T0 + 3.2)], samples))
    assert gap.gap_s == pytest.approx(2.2)  # owed at slot 4, fired at 6.2


def test_a_job_busy_with_its_backlog_is_owed_nothing_before_its_run_ends() -> None:
    job = JobInfo("behind", interval_s=10, catch_up="backfill", sleep_s=7.0, shard=0)
    execs = [ran("behind", T0, at=T0 + 8.0), ran("behind", T0 + 10, at=T0 + 15.1)]
    runs = [ok_run("behind", T0), ok_run("behind", T0 + 10)]
    samples = [LockSample(T0 + 8.5, {0: "n1"})]
    (gap,) = fault_gaps(observe(runs, execs, [kill(at=T0 + 9.0)], samples, jobs=(job,)))
    assert gap.gap_s == pytest.approx(0.1)  # T0 + 10 could not start before T0 + 15


def test_a_skipped_slot_counts_as_handled() -> None:
    runs, execs = steady("job", T0, T0 + 9)
    execs = [e for e in execs if e.slot_ms != ms(T0 + 4)]
    runs[4] = RunRecord("job", ms(T0 + 4), 1, "n2", "skipped", T0 + 4.3)
    samples = [LockSample(T0 + 3.1, {0: "n1"})]
    (gap,) = fault_gaps(observe(runs, execs, [kill(at=T0 + 3.2)], samples))
    assert gap.gap_s == pytest.approx(0.3)


def test_a_slot_skipped_before_the_fault_moves_what_is_owed() -> None:
    job = JobInfo("slow", interval_s=4, catch_up="skip", sleep_s=0.0, shard=0)
    execs = [ran("slow", T0 - 8), ran("slow", T0, at=T0 + 0.1)]
    runs = [RunRecord("slow", ms(T0 - 4), 1, "n1", "skipped", T0 - 2.5), ok_run("slow", T0)]
    samples = [LockSample(T0 - 1.5, {0: "n1"})]
    fault = kill(at=T0 - 1.0)
    (gap,) = fault_gaps(observe(runs, execs, [fault], samples, jobs=(job,)))
    assert gap.gap_s == pytest.approx(0.1)  # owed at T0, after the skipped T0 - 4


def test_a_job_without_history_is_owed_its_first_slot_of_the_phase() -> None:
    job = JobInfo("slow", interval_s=4, catch_up="once", sleep_s=0.0, shard=0)
    obs = observe([ok_run("slow", T0 + 4)], [ran("slow", T0 + 4, at=T0 + 4.1)], [kill(at=T0 + 1)],
                  [LockSample(T0 + 0.5, {0: "n1"})], jobs=(job,))  # fmt: skip
    assert fault_gaps(replace(obs, phase_start=T0 + 0.2))[0].gap_s == pytest.approx(0.1)
    assert fault_gaps(obs)[0].gap_s == pytest.approx(3.1)  # slot T0 was due and never ran


def test_what_comes_due_under_the_next_fault_is_not_counted_twice() -> None:
    execs = [ran("long", T0, node="n1"), ran("long", T0 + 10, node="n1", at=T0 + 16.0)]
    runs = [ok_run("long", T0), ok_run("long", T0 + 10)]
    samples = [LockSample(T0 + 2.0, {0: "n2", 1: "n1"})]
    faults = [kill(at=T0 + 3.0), kill(node="n2", at=T0 + 9.0)]
    first, _ = fault_gaps(observe(runs, execs, faults, samples, jobs=(JOB, LONG)))
    assert (first.affected, first.gap_s) == (1, 0.0)
    alone = fault_gaps(observe(runs, execs, faults[:1], samples, jobs=(JOB, LONG)))
    assert alone[0].gap_s == pytest.approx(6.0)


def test_unheld_stretches_are_measured_and_blamed_on_the_fault_they_began_under() -> None:
    both = {0: "n1", 1: "n2"}
    samples = [
        LockSample(T0 + 1.0, both),
        LockSample(T0 + 3.4, {1: "n2"}),
        LockSample(T0 + 3.6, None),  # Postgres did not answer: unheld as well
        LockSample(T0 + 5.4, both),
        LockSample(T0 + 13.0, {0: "n1"}),  # long after the kill and its bound
        LockSample(T0 + 13.9, both),
    ]
    stretches = unheld_stretches(observe(faults=[kill()], samples=samples))
    found = [(u.shard, round(u.duration_s, 1), u.fault, u.bound_s) for u in stretches]
    assert found == [(0, 2.0, 0, 5.0), (1, 1.8, 0, 5.0), (1, 0.9, None, 5.0)]


def test_a_fault_beyond_its_bound_fails_the_run() -> None:
    runs, execs = steady("job", T0, T0 + 9)
    execs = [e for e in execs if not T0 + 4 <= e.slot_ms / 1000 <= T0 + 9]
    execs += [ran("job", T0 + s, at=T0 + 9.5) for s in range(4, 10)]
    samples = [LockSample(T0 + 3.1, {0: "n1", 1: "n2"})]
    report = build_report(observe(runs, execs, [kill(bound=5.0)], samples), {"seed": 1})
    assert [row.ok for row in report.faults] == [False]
    assert report.faults[0].max_gap_s == pytest.approx(5.5)
    assert not report.passed and report.violations == []
    table = render_table(report)
    assert "EXCEEDED" in table and table.endswith("RESULT: FAIL")
    json.dumps(report.to_json())


# -- exactly-once effects ----------------------------------------------------------------

EFFECTS = JobInfo("fx", interval_s=1, catch_up="once", sleep_s=0.0, shard=0, kind="effects")


def effects_run(**changes: object) -> Observations:
    """Effect job "fx" succeeded at T0..T0+3 with token 10 + i and one ledger row each; slot
    T0 + 4 failed (no row)."""
    runs, execs = steady("fx", T0, T0 + 3)
    runs = [replace(r, token=10 + i) for i, r in enumerate(runs)]
    runs.append(RunRecord("fx", ms(T0 + 4), 1, "n1", "failed", T0 + 5, token=20))
    execs.append(ran("fx", T0 + 4))
    rows = [LedgerRow("fx", r.slot_ms, 1, 10 + i, "n1") for i, r in enumerate(runs[:4])]
    obs = observe(runs, execs, jobs=[EFFECTS], window=(T0, T0 + 4))
    return replace(obs, ledger=tuple(rows), **changes)  # type: ignore[arg-type]


def test_one_effect_per_succeeded_slot_with_its_completions_token_passes() -> None:
    obs = effects_run()
    (result,) = run_checks(obs)
    assert result.name == "exactly-once effects" and result.ok
    assert result.summary == "1 jobs, 4 slots succeeded, 4 rows"
    report = build_report(obs, {})
    assert report.passed and "exactly-once effects  ok" in render_table(report)
    assert run_checks(observe()) == []  # no effect job: the check is left out


def test_effects_twice_fenced_missing_or_of_slots_that_did_not_succeed_are_violations() -> None:
    obs = effects_run()
    rows = list(obs.ledger)
    rows.append(LedgerRow("fx", ms(T0), 1, 10, "n2"))  # committed twice
    rows[1] = replace(rows[1], token=9)  # a zombie's row: not the applied completion's token
    del rows[2]  # a success whose effect is missing
    rows.append(LedgerRow("fx", ms(T0 + 4), 2, 19, "n2"))  # the slot failed
    rows.append(LedgerRow("fx", ms(T0 + 7), 1, 30, "n2"))  # no run row at all
    result = exactly_once_effects(replace(obs, ledger=rows))
    assert result is not None
    assert sorted((v.kind, v.slot_ms) for v in result.violations) == [
        ("effect committed twice", ms(T0)),
        ("effect of a fenced run", ms(T0 + 1)),
        ("effect of a slot that did not succeed", ms(T0 + 4)),
        ("effect of a slot that did not succeed", ms(T0 + 7)),
        ("success without its effect", ms(T0 + 2)),
    ]
    report = build_report(replace(obs, ledger=rows), {})
    assert not report.passed and report.violations == [] and report.lost == []
    table = render_table(report)
    assert "exactly-once effects  5 VIOLATIONS" in table
    assert "CHECK exactly-once effects: effect of a fenced run: fx slot" in table
    data = report.to_json()
    assert data["checks"][0]["ok"] is False and "slot" in data["checks"][0]["violations"][0]
    json.dumps(data)


# -- allow slots ---------------------------------------------------------------------------

ALLOW = JobInfo("al", 1, "once", sleep_s=2.5, shard=0, kind="allow", max_concurrent=3)


def allow_run(**changes: object) -> Observations:
    """Allow job "al" (@every 1s, 2.5 s runs, 3 at once) ran every slot T0..T0+9 on time."""
    runs, execs = steady("al", T0, T0 + 9)
    obs = observe(runs, execs, jobs=[ALLOW], window=(T0, T0 + 9))
    return replace(obs, **changes)  # type: ignore[arg-type]


def test_allow_slots_side_by_side_within_the_limit_pass() -> None:
    obs = allow_run()
    (result,) = run_checks(obs)
    assert result.name == "allow slots" and result.ok
    assert result.summary == (
        "1 jobs, 10 slots succeeded (0 lost), at most 3 at once (3 allowed), latest start 0.01s"
    )
    assert build_report(obs, {}).passed
    # A lost attempt ends where the slot's next one starts: a run killed at once and taken
    # back 0.5 s later overlaps nothing more.
    execs = [*obs.executions]
    execs[4] = ran("al", T0 + 4, attempt=1, at=T0 + 4.01)
    execs.insert(5, ran("al", T0 + 4, node="n2", attempt=2, at=T0 + 4.5))
    runs = [replace(r, attempt=2, node="n2") if r.slot_ms == ms(T0 + 4) else r for r in obs.runs]
    kill_n1 = FaultRecord("sigkill", "n1", ("n1",), T0 + 4.2, T0 + 5, 5.0)
    result = allow_slots(replace(obs, executions=execs, runs=runs, faults=[kill_n1]))
    assert result is not None and result.ok, result.violations
    # Waiting for a free place is lateness, not loss, up to the bound.
    bound = allow_lateness_s(obs, 2.5, 3)
    assert bound == 5.0 + 3 * 2.5 + 3.0
    late = [ran("al", T0 + i, at=T0 + i + (3.0 if i == 9 else 0.01)) for i in range(10)]
    result = allow_slots(replace(obs, executions=late))
    assert result is not None and result.ok


def test_allow_too_many_at_once_twice_run_attempts_double_success_and_late_slots_fail() -> None:
    obs = allow_run()
    execs = [*obs.executions, ran("al", T0 + 3, node="n2")]  # attempt 1 of T0 + 3 again
    runs = [*obs.runs, ok_run("al", T0 + 5)]  # a second succeeded row for T0 + 5
    execs.append(ran("al", T0 + 12, at=T0 + 12 + 20.0))  # far beyond the lateness bound
    runs.append(ok_run("al", T0 + 12))
    phase = replace(obs, executions=execs, runs=runs, phase_end=T0 + 40)
    result = allow_slots(phase)
    assert result is not None
    assert sorted((v.kind, v.slot_ms) for v in result.violations) == [
        ("attempt executed twice", ms(T0 + 3)),
        ("slot started late", ms(T0 + 12)),
        ("slot succeeded twice", ms(T0 + 5)),
        ("too many at once", None),
    ]
    assert "4 executions at once, 3 allowed" in [
        v.detail for v in result.violations if v.kind == "too many at once"
    ]
    # With an asynchronous primary, a failover that lost the claim explains the same
    # attempt run again; the first execution then ends where the second began.
    failover = FaultRecord("pg-failover", "postgres", (), T0 + 9.5, T0 + 14, 12.0)
    again = [*obs.executions, ran("al", T0 + 9, node="n2", at=T0 + 10.2)]
    reclaimed = replace(obs, executions=again, faults=[failover])
    result = allow_slots(replace(reclaimed, async_replication=True))
    assert result is not None and result.ok, result.violations
    result = allow_slots(reclaimed)
    assert result is not None
    assert [v.kind for v in result.violations] == ["attempt executed twice"]
    # Slots of an allow job left unfinished are the common loss check's, counted here.
    obs = allow_run()
    unfinished = [replace(r, status="running") if r.slot_ms == ms(T0 + 2) else r for r in obs.runs]
    report = build_report(replace(obs, runs=unfinished), {})
    assert [v.job for v in report.lost] == ["al"] and not report.passed
    assert "allow slots           ok (1 jobs, 9 slots succeeded (1 lost)" in render_table(report)


# -- replace slots ----------------------------------------------------------------------------

REPLACED = JobInfo("rp", interval_s=2, catch_up="once", sleep_s=5.0, shard=3, kind="replace")


def replace_run(**changes: object) -> Observations:
    """Replace job "rp" (@every 2s, 5 s runs that ignore cancellation) started every slot
    T0..T0+8 on time; each but the last was replaced by the next and recorded cancelled."""
    slots = [T0 + i for i in range(0, 10, 2)]
    runs = [replace(ok_run("rp", s), status="cancelled") for s in slots[:-1]]
    runs.append(ok_run("rp", slots[-1]))
    obs = observe(runs, [ran("rp", s) for s in slots], jobs=[REPLACED], window=(T0, T0 + 8))
    return replace(obs, **changes)  # type: ignore[arg-type]


def test_replaced_runs_recorded_cancelled_and_slots_started_on_time_pass() -> None:
    obs = replace_run()
    (result,) = run_checks(obs)
    assert result.name == "replace slots" and result.ok, result.violations
    assert result.summary == "1 jobs, 4 runs replaced, latest start 0.01s"
    report = build_report(obs, {})
    assert report.passed and report.lost == []  # a cancelled slot is accounted for
    # A fault took an attempt of T0 + 2: its retry succeeding is not a replace matter.
    runs = [replace(r, status="succeeded", attempt=2) if r.slot_ms == ms(T0 + 2) else r
            for r in obs.runs]  # fmt: skip
    result = replace_slots(replace(obs, runs=runs))
    assert result is not None and result.ok


def test_a_replaced_run_that_succeeded_or_a_slot_that_waited_fails() -> None:
    obs = replace_run()
    # As when the next slot waited for the handler and it ran to its end: it succeeded,
    # and the next slot started late.
    runs = [replace(r, status="succeeded") if r.slot_ms == ms(T0 + 2) else r for r in obs.runs]
    execs = [ran("rp", T0 + i, at=T0 + i + (9.0 if i == 6 else 0.01)) for i in range(0, 10, 2)]
    result = replace_slots(replace(obs, runs=runs, executions=execs, phase_end=T0 + 20))
    assert result is not None
    assert sorted((v.kind, v.slot_ms) for v in result.violations) == [
        ("replaced run succeeded", ms(T0 + 2)),
        ("slot started late", ms(T0 + 6)),
    ]
    assert replace_lateness_s(obs) == 5.0 + 2.0


# -- zone placement --------------------------------------------------------------------------

PIN_A = JobInfo("pa", 2, "backfill", 0.0, shard=65536, kind="pinned", zones=("zone-a",))
PIN_AB = JobInfo("pab", 2, "backfill", 0.0, shard=65552, kind="pinned", zones=("zone-a", "zone-b"))
NODE_ZONES = {"n1": "zone-a", "n2": "zone-b", "n3": "zone-c", "n4": "zone-a"}


def pinned_run(**changes: object) -> Observations:
    """ "pa" (zone-a) ran on n1 and "pab" (zone-a, zone-b) on n2, every 2 s."""
    runs_a, execs_a = steady("pa", T0, T0 + 8, step=2, node="n1")
    runs_ab, execs_ab = steady("pab", T0, T0 + 8, step=2, node="n2")
    obs = observe(runs_a + runs_ab, execs_a + execs_ab, jobs=[PIN_A, PIN_AB], window=(T0, T0 + 8))
    return replace(obs, node_zones=NODE_ZONES, **changes)  # type: ignore[arg-type]


def test_pinned_jobs_in_their_zones_pass_and_elsewhere_fail() -> None:
    obs = pinned_run()
    (result,) = run_checks(obs)
    assert result.name == "zone placement" and result.ok
    assert result.summary == "2 jobs, 10 executions, 0 dark through a fault"
    assert build_report(obs, {}).passed
    execs = [*obs.executions]
    execs[0] = replace(execs[0], node="n2")  # pa ran in zone-b
    execs[6] = replace(execs[6], node="n3")  # pab ran in zone-c
    execs.append(ran("pa", T0 + 2, node="n9", attempt=2))  # a node of no known zone
    result = zone_placement(replace(obs, executions=execs))
    assert result is not None
    assert sorted((v.job, v.slot_ms) for v in result.violations) == [
        ("pa", ms(T0)),
        ("pa", ms(T0 + 2)),
        ("pab", ms(T0 + 2)),
    ]
    assert any(
        "ran on n9 in an unknown zone; pinned to zone-a" in v.detail for v in result.violations
    )


def test_a_job_whose_zones_are_dark_owes_nothing_until_they_return() -> None:
    # zone-a (n1, n4) killed at T0 + 2.5 for 8 s: "pa" is dark, and runs again (its
    # missed slots backfilled) 1 s after the restart; "pab" moves to n2 at once.
    zone_kill = FaultRecord("zone-kill", "zone-a", ("n1", "n4"), T0 + 2.5, T0 + 10.5, 5.0)
    holders = {65536: "n1", 65552: "n1"}
    samples = [LockSample(T0 + 2, holders)]
    runs_a, execs_a = steady("pa", T0, T0 + 2, step=2, node="n1")
    for slot in (T0 + 4, T0 + 6, T0 + 8, T0 + 10):
        runs_a.append(ok_run("pa", slot, "n4"))
        execs_a.append(ran("pa", slot, "n4", at=T0 + 11.5 + (slot - T0) / 100))
    runs_ab, execs_ab = steady("pab", T0, T0 + 2, step=2, node="n1")
    more_ab, more_ex = steady("pab", T0 + 4, T0 + 10, step=2, node="n2")
    obs = observe(
        runs_a + runs_ab + more_ab,
        execs_a + execs_ab + more_ex,
        faults=[zone_kill],
        samples=samples,
        jobs=[PIN_A, PIN_AB],
        window=(T0, T0 + 10),
    )
    obs = replace(obs, node_zones=NODE_ZONES)
    (gap,) = fault_gaps(obs)
    assert gap.affected == 2 and gap.job == "pa" and gap.gap_s == pytest.approx(1.04)
    report = build_report(obs, {})
    assert report.passed and report.lost == []
    (result,) = report.checks
    assert result.summary == "2 jobs, 12 executions, 1 dark through a fault"
    # Had n4 (zone-a) lived, "pa" should have moved to it: the same history is a 9 s gap.
    obs = replace(obs, faults=[replace(zone_kill, targets=("n1",))])
    (gap,) = fault_gaps(obs)
    assert gap.gap_s > 5.0 and not build_report(obs, {}).faults[0].ok


# -- parsing, plan, workload ------------------------------------------------------------


def test_witness_and_log_lines_are_parsed(tmp_path: Path) -> None:
    line = json.dumps(
        {
            "job": "j",
            "tenant": "default",
            "slot": "2027-01-15T08:00:01+00:00",
            "attempt": 2,
            "node": "n3",
            "zone": "zone-c",
            "at": 1.5,
        }
    )
    witness = tmp_path / "witness.jsonl"
    witness.write_text(line + "\n\n", "utf-8")
    (w,) = read_witness(witness)
    assert (w.tenant, w.zone, w.at) == ("default", "zone-c", 1.5)
    e = Execution.witnessed(w)
    assert (e.job, e.attempt, e.node, e.slot_ms % 1000) == ("j", 2, "n3", 0)
    assert read_witness(tmp_path / "absent.jsonl") == []
    logs = ['{"event": "fenced_write"}', "Traceback (most recent call last):", '{"msg": "x"}']
    assert count_log_events(logs) == {"fenced_write": 1}
    runs, execs = steady("job", T0, T0 + 2)
    obs = observe(runs, execs, [kill()], [LockSample(T0, {0: "n1"}), LockSample(T0, None)])
    assert from_json(to_json(obs)) == obs
    obs = effects_run()
    assert from_json(to_json(obs)) == obs


# -- the poison job ----------------------------------------------------------------------


def poisoned(**changes: object) -> Observations:
    """Job "job" fires every second on n1; the poison job's slot at T0 + 4 ran on n2 and n3
    (each killed) and n1 recorded it failed."""
    runs, execs = steady("job", T0, T0 + 9)
    slot = T0 + 4
    poison = [ran("poison", slot, "n2", 1, slot + 0.1), ran("poison", slot, "n3", 2, slot + 3)]
    row = RunRecord("poison", ms(slot), 2, "n1", "failed", slot + 6)
    fault = FaultRecord("poison-job", "poison", (), slot, slot + 7, 10.0)
    obs = observe([*runs, row], [*execs, *poison], faults=[fault])
    return replace(obs, poison_job="poison", poison_retries=1, **changes)  # type: ignore[arg-type]


def test_a_poison_slot_within_its_retries_and_recorded_failed_passes() -> None:
    obs = poisoned()
    report = build_report(obs, {})
    assert report.violations == [] and report.lost == [] and report.reruns == []
    assert report.poison is not None
    assert (report.poison.slots, report.poison.executions, report.poison.most_per_slot) == (1, 2, 2)
    assert "poison job            1 slots, 2 nodes killed (at most 2 per slot, 2 allowed)" in (
        render_table(report)
    )
    # Without the poison rule, the same run row would be a claim no witness explains.
    plain = replace(obs, poison_job=None)
    assert [v.kind for v in check_executions(plain)] == ["claim mismatch"]


def test_a_poison_slot_run_too_often_or_not_failed_is_a_violation() -> None:
    obs = poisoned()
    slot = T0 + 4
    again = ran("poison", slot, "n4", 3, slot + 6)
    lost_row = RunRecord("poison", ms(slot), 3, "n4", "lost", slot + 7)
    runs = [r for r in obs.runs if r.job != "poison"] + [lost_row]
    report = build_report(replace(obs, runs=runs, executions=[*obs.executions, again]), {})
    assert sorted(v.kind for v in report.violations) == [
        "poison job ran too often",
        "poison slot not recorded failed",
    ]
    assert not report.passed


def test_the_poison_fault_is_planned_with_a_bound_per_attempt() -> None:
    plan = make_plan(("poison-job", "sigkill"), NODES, 120.0, 3, BOUNDS)
    faults = {(f.targets, f.label, f.bound_s) for f in plan if f.kind == "poison-job"}
    assert faults == {((), "chaos-poison", 10.0)}


NODES = {"n1": "zone-a", "n2": "zone-b", "n3": "zone-c", "n4": "zone-a"}
BOUNDS = Bounds(kill_s=5.0, stop_s=9.0, session_timeout_s=4.0)


def test_the_plan_is_seeded_sequential_and_covers_every_kind() -> None:
    plan = make_plan(KINDS, NODES, 600.0, 7, BOUNDS)
    assert plan == make_plan(KINDS, NODES, 600.0, 7, BOUNDS)
    assert plan != make_plan(KINDS, NODES, 600.0, 8, BOUNDS)
    assert set(KINDS) <= {f.kind for f in plan}
    for before, after in itertools.pairwise(plan):
        assert before.at_s + before.span_s < after.at_s
    assert plan[-1].at_s + plan[-1].span_s <= 600.0
    stops = [f for f in plan if f.kind == "sigstop"]
    assert all(f.hold_s > BOUNDS.session_timeout_s and f.bound_s == 9.0 for f in stops)
    zone_kills = [f for f in plan if f.kind == "zone-kill"]
    assert all({NODES[n] for n in f.targets} == {f.label} for f in zone_kills)


def test_a_stall_is_held_to_the_kill_bound_plus_its_notice_not_to_the_session_timeout() -> None:
    bounds = Bounds(kill_s=5.0, stop_s=15.0, session_timeout_s=10.0)
    plan = make_plan(("pg-stall", "sigstop"), NODES, 200.0, 7, bounds)
    assert {f.bound_s for f in plan if f.kind == "pg-stall"} == {5.0 + STALL_NOTICE_S}
    assert {f.bound_s for f in plan if f.kind == "sigstop"} == {15.0}
    assert BOUNDS.stall_s == BOUNDS.stop_s  # a short session timeout ends it sooner still


def test_the_plan_refuses_what_cannot_work() -> None:
    with pytest.raises(InvalidInput, match="too short"):
        make_plan(KINDS, NODES, 60.0, 1, BOUNDS)
    with pytest.raises(InvalidInput, match="2 zones"):
        make_plan(("zone-kill",), {"n1": "a", "n2": "a"}, 60.0, 1, BOUNDS)
    with pytest.raises(InvalidInput, match="unknown fault"):
        parse_kinds("sigkill,meteor", external=False)
    with pytest.raises(InvalidInput, match="external"):
        parse_kinds("pg-restart", external=True)
    assert "pg-restart" not in parse_kinds("all", external=True)
    assert parse_kinds("sigkill, sigkill,pg-stall", external=False) == ("sigkill", "pg-stall")


def test_the_workload_is_seeded_and_mixed() -> None:
    jobs = make_workload(300, 3)
    assert jobs == make_workload(300, 3)
    assert {j.catch_up for j in jobs} == {"once", "skip", "backfill"}
    long = [j for j in jobs if j.sleep_s >= 6]
    assert 20 <= len(long) <= 80 and all(j.interval_s > j.sleep_s for j in long)
    assert jobs[0].spec().schedule.startswith("@every")
    effects = [j for j in jobs if j.kind == "effects"]
    assert 20 <= len(effects) <= 300 // 8 and all(j.name.endswith("-effects") for j in effects)
    assert all(j.sleep_s < 1 for j in effects)
    spec = effects[0].spec()
    assert spec.handler == "cluster.chaos.ledger:record" and spec.retry_backoff_s == 1.0


def test_the_workload_adds_allow_jobs_and_jobs_pinned_to_the_fleets_zones() -> None:
    jobs = make_workload(10, 3, ["zone-a", "zone-b", "zone-c"])
    assert jobs[:10] == make_workload(10, 3)[:10]
    allow = [j.spec() for j in jobs if j.kind == "allow"]
    assert len(allow) == 3
    assert all(s.overlap == "allow" and s.max_concurrent == 3 and s.retries == 2 for s in allow)
    assert all(s.schedule == "@every 1s" and s.payload == {"sleep_s": 2.5} for s in allow)
    pinned = {j.name: j.spec() for j in jobs if j.kind == "pinned"}
    assert {name: s.zones for name, s in pinned.items()} == {
        "chaos-pinned-a": ("zone-a",),
        "chaos-pinned-b": ("zone-b",),
        "chaos-pinned-c": ("zone-c",),
        "chaos-pinned-a-b": ("zone-a", "zone-b"),
        "chaos-pinned-b-c": ("zone-b", "zone-c"),
        "chaos-pinned-c-a": ("zone-a", "zone-c"),
    }
    assert all(s.catch_up == "backfill" for s in pinned.values())
    replaced = [j.spec() for j in jobs if j.kind == "replace"]
    assert len(replaced) == 2 and all(s.overlap == "replace" for s in replaced)
    assert all(s.schedule == "@every 2s" and s.payload == {"sleep_s": 5.0} for s in replaced)
    two = [j.zones for j in make_workload(0, 3, ["zone-a", "zone-b"]) if j.kind == "pinned"]
    assert two == [("zone-a",), ("zone-b",), ("zone-a", "zone-b")]


# -- the slot ledger's audit ---------------------------------------------------------------


def test_a_slot_the_audit_finds_missing_or_overwritten_fails_the_run() -> None:
    runs, execs = steady("job", T0, T0 + 9)
    counts = {"ran": 9, "reran": 1, "skipped": 0, "missing": 0, "overwritten": 0}
    rerun = AuditFinding(
        "job", ms(T0 + 3), "reran", "attempt 1 lost on n1: re-run after node death"
    )
    obs = replace(observe(runs, execs), audit_counts=counts, audit_findings=[rerun])
    clean = build_report(obs, {})
    assert clean.passed and clean.audit_failures == []
    assert "pulse audit           ran 9, reran 1" in render_table(clean)

    missing = AuditFinding("job", ms(T0 + 5), "missing", "no run and no skipped record")
    broken = build_report(
        replace(obs, audit_counts={**counts, "missing": 1}, audit_findings=[rerun, missing]), {}
    )
    assert not broken.passed and broken.violations == [] and broken.lost == []
    table = render_table(broken)
    assert "AUDIT: missing: job slot" in table and table.endswith("RESULT: FAIL")
    assert broken.to_json()["audit_findings"][1]["slot"].endswith("+00:00")
    # Observations keep the findings through JSON, for a post-mortem.
    assert from_json(to_json(replace(obs, audit_findings=[missing]))).audit_findings == (missing,)
