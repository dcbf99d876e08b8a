"""The ``pg-blip`` fault and its check: a blip shorter than the grace moves no shard."""

from __future__ import annotations

from collections.abc import Sequence

from cluster.chaos.plan import BLIP_S, Bounds, make_plan, parse_kinds
from cluster.chaos.verdict.kinds import run_checks
from cluster.chaos.verdict.observations import FaultRecord, LockSample, Observations
from tests.helpers import observations
from tests.helpers.observations import T0

BLIP = FaultRecord("pg-blip", "n1", ("n1",), T0 + 3, T0 + 3 + BLIP_S, BLIP_S + 5.0)
BEFORE = LockSample(T0 + 2.8, {0: "n1", 1: "n2"})
SETTLED = LockSample(T0 + 11.0, {0: "n1", 1: "n2"})  # the settle time after the blip's end


def observe(faults: Sequence[FaultRecord] = (), samples: Sequence[LockSample] = ()) -> Observations:
    return observations.observe(faults=faults, samples=samples)


def test_a_blip_is_planned_short_and_needs_the_nodes_postgres_proxies() -> None:
    bounds = Bounds(kill_s=5.0, stop_s=15.0, session_timeout_s=10.0)
    fault = make_plan(("pg-blip",), {"n1": "a", "n2": "b"}, 60.0, 3, bounds)[0]
    assert fault.kind == "pg-blip" and fault.hold_s == BLIP_S < 2.0
    assert fault.bound_s == BLIP_S + 5.0
    assert "pg-blip" in parse_kinds("all", external=True)
    assert "pg-blip" not in parse_kinds("all", external=False, pg_ha=True)


def test_shards_left_unheld_through_a_blip_pass() -> None:
    samples = [BEFORE, LockSample(T0 + 3.5, {1: "n2"}), LockSample(T0 + 5.0, {0: "n1", 1: "n2"})]
    samples.append(SETTLED)
    (result,) = run_checks(observe(faults=[BLIP], samples=samples))
    assert result.name == "blips move no shard" and result.ok
    assert result.summary == "1 blips, 0 shards moved"


def test_a_shard_taken_by_another_node_during_a_blip_is_a_violation() -> None:
    samples = [BEFORE, LockSample(T0 + 5.4, {0: "n2", 1: "n2"}), SETTLED]
    (result,) = run_checks(observe(faults=[BLIP], samples=samples))
    (violation,) = result.violations
    assert violation.kind == "shard moved in a blip"
    assert "shard 0 of n1 held by n2 2.4s after the blip began" in violation.detail


def test_a_shard_that_moves_for_good_moved_for_another_reason() -> None:
    """n3 restarting after an earlier fault takes back its shard 0 that n1 held for it."""
    after = LockSample(T0 + 11.0, {0: "n3", 1: "n2"})
    samples = [BEFORE, LockSample(T0 + 3.5, {0: "n3", 1: "n2"}), after]
    (result,) = run_checks(observe(faults=[BLIP], samples=samples))
    assert result.ok and result.summary == "1 blips, 0 shards moved"


def test_a_run_without_blips_has_no_blip_check() -> None:
    assert run_checks(observe(samples=[BEFORE])) == []
