"""Runs the chosen scenarios in one throwaway database and reports them."""

from __future__ import annotations

import logging
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import report, results
from bench.database import BenchDatabase
from bench.results import ScenarioResult
from bench.scale import run_scale
from bench.scenarios import Baselines, run_burst, run_failover, run_rebalance, run_steady
from bench.sizes import Sizes
from bench.trial import Bench

logger = logging.getLogger(__name__)

Scenario = Callable[[Bench, Baselines], Awaitable[ScenarioResult]]
SCENARIOS: dict[str, Scenario] = {
    "steady": run_steady,
    "burst": run_burst,
    "failover": run_failover,
    "scale": run_scale,
    "rebalance": run_rebalance,
}


def _say(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


async def run(
    names: Sequence[str],
    sizes: Sizes,
    out: Path,
    command: str,
    keep: bool = False,
    profile_dir: Path | None = None,
) -> tuple[list[ScenarioResult], list[str]]:
    """Run the scenarios in order; returns those that finished and the names that failed."""
    database = BenchDatabase.new()
    workdir = Path(tempfile.mkdtemp(prefix="pulse-bench-"))
    bench = Bench(database, workdir, secrets.token_hex(3), sizes, profile_dir)
    run_info: dict[str, Any] = {
        "run": bench.tag,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": command,
        "machine": results.machine(),
    }
    done: list[ScenarioResult] = []
    failed: list[str] = []
    _say(f"database {database.name}, work files in {workdir}")
    await database.create()
    try:
        baselines = Baselines(bench)
        for name in names:
            _say(f"{name}: running")
            started = time.monotonic()
            try:
                result = await SCENARIOS[name](bench, baselines)
            except Exception as exc:  # one broken scenario should not cost the others
                logger.warning("%s failed", name, exc_info=True)
                _say(f"{name}: FAILED: {type(exc).__name__}: {exc}")
                failed.append(name)
                continue
            _say(f"{name}: done in {time.monotonic() - started:.0f}s")
            results.append(out, run_info, result)
            done.append(result)
    finally:
        await database.drop()
        if keep:
            _say(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return done, failed


def print_report(done: Sequence[ScenarioResult]) -> None:
    print(report.render(done))
    plans = report.plans(done)
    if plans:
        print()
        print(plans)
