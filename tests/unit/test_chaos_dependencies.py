"""The ``dependencies`` check of ``pulse chaos``: a downstream slot ran at most once, only
after its upstreams' same slots succeeded, and every released slot in the window ran."""

from __future__ import annotations

from dataclasses import replace

from cluster.chaos.verdict.kinds import dependencies, run_checks
from cluster.chaos.verdict.observations import Execution, JobInfo, Observations, RunRecord
from cluster.chaos.verdict.safety import find_lost
from cluster.chaos.workload import make_workload
from tests.helpers import observations
from tests.helpers.observations import T0

UP = JobInfo("up", 2, "backfill", 0.3, shard=0, kind="dependent")
DOWN = JobInfo("down", 2, "backfill", 0.3, shard=1, kind="dependent", after=("up",))


def ms(seconds: float) -> int:
    return round(seconds * 1000)


def chain() -> Observations:
    """``up`` succeeded at each slot, finishing 0.4 s in; ``down`` started 0.05 s later."""
    slots = [T0 + 2 * i for i in range(5)]
    runs = [RunRecord("up", ms(s), 1, "n1", "succeeded", s + 0.4) for s in slots]
    runs += [RunRecord("down", ms(s), 1, "n2", "succeeded", s + 0.8) for s in slots]
    execs = [Execution("up", ms(s), 1, "n1", s + 0.01) for s in slots]
    execs += [Execution("down", ms(s), 1, "n2", s + 0.45) for s in slots]
    return observations.observe(jobs=(UP, DOWN), runs=runs, executions=execs, window_s=8.0)


def test_a_clean_chain_passes() -> None:
    (result,) = run_checks(chain())
    assert result.name == "dependencies" and result.ok
    assert result.summary == "1 downstream jobs, 5 slots released, 5 runs"


def test_early_doubled_or_lost_downstream_slots_are_violations() -> None:
    obs = chain()
    execs = list(obs.executions)
    execs[5] = replace(execs[5], at=T0 + 0.2)  # down started before up's completion
    execs.append(replace(execs[6]))  # attempt 1 of a slot witnessed twice
    runs = [r for r in obs.runs if (r.job, r.slot_ms) != ("down", ms(T0 + 8))]
    runs = [replace(r, status="failed") if (r.job, r.slot_ms) == ("up", ms(T0 + 6)) else r
            for r in runs]  # fmt: skip
    result = dependencies(replace(obs, executions=execs, runs=runs))
    assert result is not None
    assert sorted((v.kind, v.slot_ms) for v in result.violations) == [
        ("downstream slot ran twice", ms(T0 + 2)),
        ("ran before its upstream succeeded", ms(T0)),
        ("ran before its upstream succeeded", ms(T0 + 6)),
        ("released slot never ran", ms(T0 + 8)),
    ]


def test_the_workload_has_a_chain_with_a_fan_in() -> None:
    jobs = {j.name: j for j in make_workload(4, 1) if j.kind == "dependent"}
    assert {name: j.after for name, j in jobs.items()} == {
        "chaos-dep-up": (),
        "chaos-dep-mid-1": ("chaos-dep-up",),
        "chaos-dep-mid-2": ("chaos-dep-up",),
        "chaos-dep-down": ("chaos-dep-mid-1", "chaos-dep-mid-2"),
        "chaos-chain-1": ("chaos-dep-up",),
        "chaos-chain-2": ("chaos-chain-1",),
    }
    down = jobs["chaos-dep-down"].spec()
    assert (down.after_failure, down.catch_up, down.after_match) == ("skip", "backfill", "same")
    chained = jobs["chaos-chain-2"].spec()
    assert (chained.schedule, chained.after, chained.after_match) == (
        "@after:chaos-chain-1",
        ("chaos-chain-1",),
        "chain",
    )


def test_a_chained_job_owes_only_the_slots_its_upstream_succeeded() -> None:
    obs = chain()
    chained = replace(DOWN, name="down", chained=True)
    # up's slot 4 failed: a chained down has no slot there, and that is not a loss.
    runs = [r for r in obs.runs if (r.job, r.slot_ms) != ("down", ms(T0 + 4))]
    runs = [replace(r, status="failed") if (r.job, r.slot_ms) == ("up", ms(T0 + 4)) else r
            for r in runs]  # fmt: skip
    expected, lost = find_lost(replace(obs, jobs={"up": UP, "down": chained}, runs=runs))
    assert (expected, lost) == (9, []), "up's 5 slots (a failed one is accounted), down's 4"
    # A clocked downstream owes that slot all the same.
    _, clocked = find_lost(replace(obs, runs=runs))
    assert ("down", ms(T0 + 4)) in {(v.job, v.slot_ms) for v in clocked}
