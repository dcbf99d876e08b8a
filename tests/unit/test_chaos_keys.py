"""The chaos check ``key limits`` on hand-made observations (cluster/chaos/verdict/kinds.py):
runs counted from their start and end times in the database, a run that took the place
its predecessor gave back at the same instant not counted with it, and the excess named."""

from __future__ import annotations

from cluster.chaos.verdict.kinds import key_limits
from cluster.chaos.verdict.observations import JobInfo, Observations, RunRecord
from cluster.chaos.workload import KEY, KEY_LIMIT, keyed_jobs
from tests.helpers import observations
from tests.helpers.observations import T0


def job(name: str, uses: tuple[str, ...] = ("k",)) -> JobInfo:
    return JobInfo(name, interval_s=1, catch_up="once", sleep_s=0.4, shard=0, uses=uses)


def run(name: str, start: float, end: float, attempt: int = 1) -> RunRecord:
    slot_ms = int((T0 + start) * 1000)
    return RunRecord(name, slot_ms, attempt, "n1", "succeeded", T0 + end, 1, T0 + start)


def observe(runs: list[RunRecord], jobs: list[JobInfo], keys: dict[str, int]) -> Observations:
    return observations.observe(jobs=jobs, runs=runs, keys=keys)


def test_runs_within_the_limit_pass_and_back_to_back_ones_are_not_counted_together() -> None:
    jobs = [job("a"), job("b"), job("c"), job("free", ())]
    runs = [run("a", 0, 1), run("b", 0.5, 1.5), run("c", 1, 2), run("free", 0, 9)]
    result = key_limits(observe(runs, jobs, {"k": 2}))
    assert result is not None and result.ok
    assert result.summary == "1 key, 3 runs, k at most 2 of 2"


def test_a_run_past_the_limit_is_a_violation() -> None:
    jobs = [job("a"), job("b"), job("c")]
    runs = [run("a", 0, 1), run("b", 0.5, 1.5), run("c", 0.9, 2)]
    result = key_limits(observe(runs, jobs, {"k": 2}))
    assert result is not None
    (found,) = result.violations
    assert (found.kind, found.job) == ("key above its limit", "c")
    assert found.detail == "3 runs held k (limit 2), attempt 1"


def test_a_run_without_keyed_jobs_has_no_such_check() -> None:
    assert key_limits(observe([run("a", 0, 1)], [job("a", ())], {})) is None


def test_the_keyed_jobs_of_the_workload_share_the_key_the_harness_sets() -> None:
    assert {j.uses for j in keyed_jobs()} == {(KEY,)} and len(keyed_jobs()) > KEY_LIMIT
