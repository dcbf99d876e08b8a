"""What one scenario measured, per system, and the JSON-lines record of a run."""

from __future__ import annotations

import functools
import json
import os
import platform
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Measure:
    """One system (``pulse`` or ``baseline``) in one scenario.

    Lag is slot -> handler start (witness file); drain is last slot -> every job of the
    window completed in the database; CPU is per 1,000 fires, from /proc.
    """

    system: str
    expected: int | None = None
    fires: int | None = None
    missing: int | None = None
    duplicates: int | None = None
    lag_p50_ms: float | None = None
    lag_p99_ms: float | None = None
    lag_max_ms: float | None = None
    drain_s: float | None = None
    node_cpu_s: float | None = None
    pg_cpu_s: float | None = None
    node_cpu_per_1k_s: float | None = None
    pg_cpu_per_1k_s: float | None = None
    peak_rss_mb: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def per_1k(self) -> None:
        if self.fires:
            if self.node_cpu_s is not None:
                self.node_cpu_per_1k_s = self.node_cpu_s / self.fires * 1000
            if self.pg_cpu_s is not None:
                self.pg_cpu_per_1k_s = self.pg_cpu_s / self.fires * 1000


RATIO_FIELDS = (
    "lag_p50_ms",
    "lag_p99_ms",
    "lag_max_ms",
    "drain_s",
    "node_cpu_per_1k_s",
    "pg_cpu_per_1k_s",
    "peak_rss_mb",
)
RATIO_EXTRAS = (
    "a_drain_s",
    "claim_p50_ms",
    "claim_p99_ms",
    "idle_claim_p99_ms",
    "idle_node_cpu_pct",
    "idle_pg_cpu_pct",
    "live_claim_p50_ms",
    "live_claim_p99_ms",
    "window_claim_p50_ms",
    "window_claim_p99_ms",
)


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b <= 0:
        return None
    return a / b


@dataclass
class ScenarioResult:
    scenario: str
    params: dict[str, Any]
    pulse: Measure
    baseline: Measure
    baseline_note: str = ""
    round: int = 1  # of ``--rounds``: each round measures both systems again

    def ratios(self) -> dict[str, float | None]:
        found = {f: ratio(getattr(self.pulse, f), getattr(self.baseline, f)) for f in RATIO_FIELDS}
        for key in RATIO_EXTRAS:
            if key in self.pulse.extra or key in self.baseline.extra:
                found[key] = ratio(self.pulse.extra.get(key), self.baseline.extra.get(key))
        return {k: v for k, v in found.items() if v is not None}


def machine() -> dict[str, Any]:
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu": model,
        "python": platform.python_version(),
        "kernel": platform.release(),
    }


@functools.cache
def source_commit() -> str | None:
    """The commit of the tree being measured (``-dirty`` with local changes), or None."""
    try:
        found = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=7"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return found.stdout.strip() or None


def append(path: Path, run: dict[str, Any], result: ScenarioResult) -> None:
    record = {
        "commit": source_commit(),
        **run,
        "scenario": result.scenario,
        "round": result.round,
        "params": result.params,
        "pulse": asdict(result.pulse),
        "baseline": asdict(result.baseline),
        "baseline_note": result.baseline_note,
        "ratios": result.ratios(),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(record, default=str) + "\n")
