"""The chaos check ``catch-up skips`` on hand-made observations
(cluster/chaos/verdict/skips.py): a true reason passes; a reason naming another policy, a
skip within the grace, a record written sooner than it says the slot was missed, and a
slot coalesced into one with no record are each named."""

from __future__ import annotations

from datetime import UTC, datetime

from cluster.chaos.verdict.kinds import skip_reasons
from cluster.chaos.verdict.observations import JobInfo, Observations, RunRecord
from tests.helpers import observations
from tests.helpers.observations import T0


def job(name: str, catch_up: str, grace_s: float = 60.0) -> JobInfo:
    return JobInfo(name, 1, catch_up, 0.1, 0, grace_s=grace_s)


def record(
    name: str, at: float, written: float, status: str = "skipped", reason: str | None = None
) -> RunRecord:
    return RunRecord(name, int((T0 + at) * 1000), 1, "n1", status, T0 + written, reason=reason)


def iso(at: float) -> str:
    return datetime.fromtimestamp(T0 + at, UTC).isoformat()


def observe(runs: list[RunRecord], jobs: list[JobInfo]) -> Observations:
    return observations.observe(jobs=jobs, runs=runs, window_s=60.0)


def test_true_reasons_pass() -> None:
    runs = [
        record("s", 0, 4, reason="missed by 3s500ms (catch-up skip, grace 2s)"),
        record("o", 0, 3, reason=f"missed by 2s (catch-up once: coalesced into {iso(2)})"),
        record("o", 2, 4, status="succeeded"),
        record("b", 0, 9, reason="missed by 8s (catch-up backfill, beyond the cap of 3)"),
        record("b", 5, 9, status="succeeded"),
    ]
    jobs = [job("s", "skip", 2), job("o", "once"), job("b", "backfill")]
    result = skip_reasons(observe(runs, jobs))
    assert result is not None and result.ok
    assert result.summary == "3 slots skipped as missed"


def test_untrue_reasons_are_named() -> None:
    runs = [
        record("s", 0, 4, reason="missed by 3s (catch-up once: coalesced into " + iso(3) + ")"),
        record("g", 0, 4, reason="missed by 1s500ms (catch-up skip, grace 2s)"),
        record("w", 0, 1, reason="missed by 5s (catch-up skip, grace 1s)"),
        record("o", 5, 9, reason=f"missed by 3s (catch-up once: coalesced into {iso(5)})"),
        record("n", 0, 9, reason=f"missed by 3s (catch-up once: coalesced into {iso(3)})"),
        record("x", 0, 9, reason="blackout window 1 (...)"),
    ]
    jobs = [
        job("s", "skip", 1),
        job("g", "skip", 2),
        job("w", "skip", 1),
        job("o", "once"),
        job("n", "once"),
        job("x", "once"),
    ]
    result = skip_reasons(observe(runs, jobs))
    assert result is not None
    details = {v.job: v.detail for v in result.violations}
    assert details == {
        "s": "names catch-up once; the job's is skip",
        "g": "missed by 1.500s, within the job's grace of 2s",
        "w": "says missed by 5.000s, recorded 1.000s after its slot",
        "o": f"coalesced into {iso(5)}, not after it",
        "n": f"coalesced into {iso(3)}, which has no record",
    }
    assert {v.kind for v in result.violations} == {"skip reason untrue"}


def test_a_run_with_no_skip_by_catch_up_has_no_such_check() -> None:
    runs = [record("o", 0, 1, status="succeeded"), record("o", 1, 2, reason="paused")]
    assert skip_reasons(observe(runs, [job("o", "once")])) is None
