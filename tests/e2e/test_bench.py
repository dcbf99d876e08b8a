"""The benchmark runner: a ``--quick`` run counts correctly; its analysis is exact.

Never a speed: the machine is shared, so only whether the runner works and counts
right is asserted (every slot of steady and burst fired exactly once, for Pulse and for
the baseline, and the table printed; fanout's figures reported, whatever they are).
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest

from bench.analysis import (
    Fire,
    bucket_quantile,
    count,
    expected_slots,
    histogram,
    longest_gap,
    merge,
    percentile,
    reruns_of,
    since,
)
from bench.fanout import Shape, figures, tenants
from bench.report import spread
from bench.results import Measure, ScenarioResult
from bench.scale_live import claim_figures, window_schedule, window_size
from bench.scenarios import MAX_EVERY_S, burst_slot
from bench.sizes import DEFAULT
from cluster.chaos.witness import Execution
from node.metrics import CLAIM_BUCKETS
from tests.helpers.databases import ADMIN_URL

REPO = Path(__file__).resolve().parents[2]


def _bench(*argv: str) -> subprocess.CompletedProcess[str]:
    """``python -m bench ARGV`` from the repository; it must succeed."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=870,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.timeout(900)  # a hang guard: 182 s in a full run on one VM, 306 s on another
def test_quick_bench_runs_and_counts(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    proc = _bench("--quick", "--out", str(out))
    lines = proc.stdout.splitlines()
    assert lines[0].split()[:3] == ["scenario", "system", "expected"]
    assert sum(1 for line in lines if line.split()[:1] == ["ratio"]) == 11
    assert "claim plan (pulse" in proc.stdout
    assert "targets, fairness on: last B..K start / A's drain" in proc.stdout

    records = {r["scenario"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert set(records) == {
        "steady", "burst", "fanout", "fanout_once", "failover", "scale", "rebalance", "prune",
        "chain", "audit", "limits",
    }  # fmt: skip
    # Limits: both trials are Pulse (keys, then none), every slot fired once; slots waited.
    limits = records["limits"]
    for system in ("pulse", "baseline"):
        m = limits[system]
        assert (m["fires"], m["missing"], m["duplicates"]) == (m["expected"], 0, 0), m
    assert limits["pulse"]["extra"]["slots_waited"] > 0, limits
    # The audit finds every slot the fill left without a row, and reads every row it left.
    audit, rows = records["audit"]["pulse"], records["audit"]["baseline"]
    assert audit["fires"] == audit["expected"] > rows["fires"] > 0, (audit, rows)
    assert audit["missing"] == audit["expected"] - rows["fires"], (audit, rows)
    assert audit["extra"]["verdicts"] == {"ran": rows["fires"], "missing": audit["missing"]}
    chain = records["chain"]["pulse"]
    assert (chain["fires"], chain["missing"]) == (chain["expected"], 0), chain
    assert chain["extra"]["released"] > 0 and chain["extra"]["release_p99_ms"] is not None
    assert chain["extra"]["chained_released"] > 0, chain
    assert chain["extra"]["chained_missing"] == chain["extra"]["chained_duplicates"] == 0, chain
    for scenario in ("steady", "burst"):
        for system in ("pulse", "baseline"):
            m = records[scenario][system]
            assert m["expected"] > 0, (scenario, system)
            assert (m["fires"], m["missing"], m["duplicates"]) == (m["expected"], 0, 0), (
                scenario,
                system,
                m,
            )
            assert m["lag_max_ms"] is not None and m["drain_s"] is not None
            # CPU is counted in clock ticks: a quick run may spend less than one.
            assert m["node_cpu_s"] >= 0 and m["peak_rss_mb"] > 0
        # A ratio is reported wherever the baseline's figure is above zero, and only there.
        pulse, base = (records[scenario][s]["node_cpu_per_1k_s"] for s in ("pulse", "baseline"))
        ratios = records[scenario]["ratios"]
        if base:
            assert ratios["node_cpu_per_1k_s"] == pytest.approx(pulse / base)
        else:
            assert "node_cpu_per_1k_s" not in ratios
    # Fanout: both trials are Pulse (fairness on, then off) and report their figures.
    fanout = records["fanout"]
    for system in ("pulse", "baseline"):
        m = fanout[system]
        assert (m["fires"], m["missing"], m["duplicates"]) == (m["expected"], 0, 0), m
        extra = m["extra"]
        assert extra["others_started"] == 10 * 2  # the quick size: 10 small tenants of 2
        for key in ("a_drain_s", "others_lag_p50_ms", "others_lag_p99_ms", "others_lag_max_ms"):
            assert extra[key] is not None, (system, key)
        assert extra["others_share_of_a_drain"] is not None
    assert "a_drain_s" in fanout["ratios"]
    once = records["fanout_once"]  # one-off jobs on one node of 4 slots: 3 small tenants of 2
    for system in ("pulse", "baseline"):
        m = once[system]
        assert (m["fires"], m["missing"], m["duplicates"]) == (m["expected"], 0, 0), m
        assert m["extra"]["others_started"] == 3 * 2 and m["extra"]["a_drain_s"] is not None
    failover = records["failover"]["pulse"]
    assert failover["extra"]["longest_gap_s"] is not None
    assert failover["extra"]["reruns_of_killed"] >= 0
    assert records["rebalance"]["pulse"]["extra"]["join_settle_s"] is not None
    # Prune: both trials are Pulse, fire every slot once, and only one of them prunes.
    prune = records["prune"]
    for system in ("pulse", "baseline"):
        m = prune[system]
        assert (m["fires"], m["missing"], m["duplicates"]) == (m["expected"], 0, 0), m
        assert m["extra"]["window_claim_p99_ms"] > 0
    assert prune["pulse"]["extra"]["runs_pruned"] > 0
    assert prune["baseline"]["extra"]["runs_pruned"] == 0
    assert "window_claim_p99_ms" in prune["ratios"]
    scale = records["scale"]
    for system in ("pulse", "baseline"):
        m = scale[system]
        assert m["extra"]["claim_p99_ms"] > 0
        assert m["extra"]["commit_p50_ms"] > 0 and m["extra"]["commit_p99_ms"] > 0
        assert any("jobs" in line for line in m["extra"]["plan"])
        # The live window: every job that fell due in it fired once, and the process's
        # own claims over it were counted.
        assert m["expected"] > 0
        assert (m["fires"], m["missing"], m["duplicates"]) == (m["expected"], 0, 0), m
        assert m["extra"]["live_claims"] > 0 and m["extra"]["live_claim_p99_ms"] > 0
        assert 0 <= m["extra"]["live_claims_over_50ms"] <= m["extra"]["live_claims"]

    # The benchmark's own database is gone.
    name = re.search(r"database (pulse_bench_[0-9a-f]+)", proc.stderr)
    assert name is not None
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        left = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name[1],)).fetchone()
    assert left is None


@pytest.mark.e2e
@pytest.mark.timeout(400)
def test_rounds_measure_both_systems_again_and_report_the_spread(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    proc = _bench("--quick", "--scenarios", "burst", "--rounds", "2", "--out", str(out))
    assert "round 1:" in proc.stdout and "round 2:" in proc.stdout
    assert re.search(r"^burst +2 rounds: .*node cpu/1k", proc.stdout, re.MULTILINE)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["scenario"], r["round"]) for r in records] == [("burst", 1), ("burst", 2)]
    assert len({r["run"] for r in records}) == 1
    for record in records:
        for system in ("pulse", "baseline"):
            m = record[system]
            assert (m["fires"], m["missing"], m["duplicates"]) == (m["expected"], 0, 0)


def test_spread_gives_each_ratio_median_and_range() -> None:
    def result(round_no: int, pulse_cpu: float) -> ScenarioResult:
        pulse = Measure("pulse", node_cpu_per_1k_s=pulse_cpu, lag_p99_ms=None)
        base = Measure("baseline", node_cpu_per_1k_s=0.1, lag_p99_ms=10.0)
        return ScenarioResult("steady", {}, pulse, base, round=round_no)

    text = spread([result(1, 0.25), result(2, 0.2), result(3, 0.3)])
    assert "steady     3 rounds: node cpu/1k 2.50x (2.00x - 3.00x)" in text
    assert "lag p99" not in text  # no round had both figures


def _fire(job: str, slot: float, at: float) -> Fire:
    return Fire(job=job, slot=slot, attempt=1, node="n", at=at)


def test_count_finds_missing_and_doubled_slots_and_ignores_others() -> None:
    expected = expected_slots(["a", "b"], [100.0, 105.0])
    fires = [
        _fire("a", 100.0, 100.010),
        _fire("a", 105.0, 105.020),
        _fire("a", 105.0, 106.000),  # doubled
        _fire("b", 100.0, 100.030),  # b@105 missing
        _fire("b", 110.0, 110.000),  # outside the window
    ]
    c = count(fires, expected)
    assert (c.expected, c.fires, c.missing, c.duplicates) == (4, 4, 1, 1)
    assert c.lag_max_ms == pytest.approx(1000.0)
    assert c.lag_p50_ms == pytest.approx(20.0)


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile([], 50) is None


def test_longest_gap_spans_the_kill() -> None:
    fires = [_fire("a", 0, t) for t in (0.0, 5.0, 10.0, 17.5, 22.5)]
    fires += [_fire("b", 0, t) for t in (0.0, 5.0, 10.0)]  # never ran after the kill
    assert longest_gap(fires, after=12.0, until=30.0) == pytest.approx(20.0)
    assert longest_gap(fires[:5], after=12.0, until=30.0) == pytest.approx(7.5)


def test_reruns_of_a_killed_node_are_told_apart_from_other_duplicates() -> None:
    fires = [
        Fire("a", 10.0, 1, "n2", 10.01),
        Fire("a", 10.0, 2, "n1", 14.0),  # n2 was killed at 11: re-run after recovery
        Fire("b", 10.0, 1, "n1", 10.02),
        Fire("b", 10.0, 1, "n3", 10.03),  # doubled, not the killed node's
        Fire("c", 20.0, 1, "n2", 20.0),  # n2 again, but after the kill: not counted
        Fire("c", 20.0, 1, "n1", 20.1),
    ]
    assert reruns_of(fires, "n2", before=11.0) == 1


def test_burst_slot_is_a_slot_of_its_schedule() -> None:
    now = int(datetime(2026, 5, 1, tzinfo=UTC).timestamp())
    for earliest in range(now, now + 500):
        t0, every = burst_slot(earliest)
        assert earliest <= t0 < earliest + 10
        assert t0 % every == 0 and every <= MAX_EVERY_S
        assert every > 365 * 86400  # the next slot is years away


def test_fanout_tenants_are_shuffled_the_same_way_every_run() -> None:
    sizes = replace(DEFAULT, fanout_jobs=50, fanout_tenants=3, fanout_tenant_jobs=2)
    order = tenants(Shape.of(sizes))
    assert sorted(order) == ["A"] * 50 + ["B", "B", "C", "C", "D", "D"]
    assert order == tenants(Shape.of(sizes))
    assert order[-6:] != ["B", "B", "C", "C", "D", "D"]  # not loaded last


def test_fanout_figures_take_each_jobs_first_start_of_the_slot() -> None:
    due = datetime(2026, 5, 1, tzinfo=UTC)

    def start(job: str, tenant: str, after_s: float, slot: datetime = due) -> Execution:
        return Execution(job, tenant, slot, 1, "n", None, due.timestamp() + after_s)

    found = figures(
        [
            start("a1", "A", 0.5),
            start("a2", "A", 4.0),
            start("a1", "A", 6.0),  # a1 again: its first start counts
            start("a3", "A", 9.0, due.replace(hour=1)),  # another slot: not counted
            start("b1", "B", 0.1),
            start("c1", "C", 0.3),
        ],
        due.timestamp(),
    )
    assert found["a_drain_s"] == pytest.approx(4.0)
    assert found["others_started"] == 2
    assert found["others_lag_p50_ms"] == pytest.approx(100.0)
    assert found["others_lag_max_ms"] == pytest.approx(300.0)
    assert found["others_share_of_a_drain"] == pytest.approx(0.075)


def test_histogram_quantiles_interpolate_inside_a_bucket() -> None:
    h = histogram([0.5, 1.5, 1.5, 3.0], [1.0, 2.0, 4.0])
    assert h == {1.0: 1, 2.0: 3, 4.0: 4, math.inf: 4}
    assert bucket_quantile(h, 50) == pytest.approx(1.5)  # rank 2: half-way into (1, 2]
    assert bucket_quantile(h, 100) == pytest.approx(4.0)
    assert bucket_quantile(histogram([], [1.0]), 50) is None
    # Above every finite bound: the highest one, the most a histogram can tell.
    assert bucket_quantile(histogram([9.0], [1.0, 2.0]), 99) == 2.0


def test_histograms_of_several_nodes_add_up_over_a_window() -> None:
    before = {1.0: 2.0, math.inf: 3.0}
    after = {1.0: 5.0, math.inf: 9.0}
    other = {1.0: 1.0, math.inf: 1.0}
    assert merge([since(after, before), other]) == {1.0: 4.0, math.inf: 7.0}


def test_live_claims_are_told_within_5ms_and_over_50ms() -> None:
    figures = claim_figures(histogram([0.001, 0.004, 0.006, 0.06, 0.2], CLAIM_BUCKETS))
    assert figures["live_claims"] == 5
    assert figures["live_claims_within_5ms"] == pytest.approx(0.4)
    assert figures["live_claims_over_50ms"] == 2


def test_live_window_slots_run_once_in_it() -> None:
    assert window_size(1_000_000, 6000.0, 60.0) == 10_000
    assert window_size(10, 6000.0, 60.0) == 1
    start = datetime(2026, 5, 1, tzinfo=UTC).timestamp()
    for offset in range(0, 12_000, 7):
        first = start + offset + 0.25
        every = int(window_schedule(first, first + 60, 120).removeprefix("@every ")[:-1])
        next_slot = math.floor(first / every) * every + every
        assert next_slot > first + 60 + 120, (first, every)
