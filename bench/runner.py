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
from bench.audit import run_audit
from bench.chain import run_chain
from bench.database import BenchDatabase
from bench.fanout import run_fanout
from bench.limits import run_limits
from bench.prune import run_prune
from bench.results import ScenarioResult
from bench.scale import run_scale
from bench.scenarios import Baselines, run_burst, run_failover, run_rebalance, run_steady
from bench.sizes import Sizes
from bench.trial import Bench

logger = logging.getLogger(__name__)

# A scenario measures one thing, or several of one kind (fanout: periodic and one-off jobs).
Scenario = Callable[[Bench, Baselines], Awaitable[ScenarioResult | list[ScenarioResult]]]
SCENARIOS: dict[str, Scenario] = {
    "steady": run_steady,
    "burst": run_burst,
    "fanout": run_fanout,
    "failover": run_failover,
    "scale": run_scale,
    "rebalance": run_rebalance,
    "prune": run_prune,
    "chain": run_chain,
    "audit": run_audit,
    "limits": run_limits,
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
    rounds: int = 1,
) -> tuple[list[ScenarioResult], list[str]]:
    """Run the scenarios in order, ``rounds`` times over; returns those that finished and
    the names that failed (with their round when there are several)."""
    database = BenchDatabase.new()
    workdir = Path(tempfile.mkdtemp(prefix="pulse-bench-"))
    tag = secrets.token_hex(3)
    run_info: dict[str, Any] = {
        "run": tag,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": command,
        "machine": results.machine(),
    }
    done: list[ScenarioResult] = []
    failed: list[str] = []
    _say(f"database {database.name}, work files in {workdir}")
    await database.create()
    try:
        for round_no in range(1, rounds + 1):
            # Each round has its own work files, cluster names and profiles: nothing carries
            # over. (A path joined with "" is the path itself.)
            part = f"round{round_no}" if rounds > 1 else ""
            where = workdir / part
            where.mkdir(exist_ok=True)
            profiles = None if profile_dir is None else profile_dir / part
            bench = Bench(database, where, tag + part, sizes, profiles)
            baselines = Baselines(bench)
            for name in names:
                label = name if rounds == 1 else f"{name} (round {round_no} of {rounds})"
                _say(f"{label}: running")
                started = time.monotonic()
                try:
                    measured = await SCENARIOS[name](bench, baselines)
                except Exception as exc:  # one broken scenario should not cost the others
                    logger.warning("%s failed", label, exc_info=True)
                    _say(f"{label}: FAILED: {type(exc).__name__}: {exc}")
                    failed.append(label)
                    continue
                _say(f"{label}: done in {time.monotonic() - started:.0f}s")
                for result in measured if isinstance(measured, list) else [measured]:
                    result.round = round_no
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
    rounds = sorted({r.round for r in done})
    for round_no in rounds:
        if len(rounds) > 1:
            print(f"round {round_no}:")
        print(report.render([r for r in done if r.round == round_no]))
    if len(rounds) > 1:
        print()
        print(report.spread(done))
    plans = report.plans([r for r in done if r.round == rounds[-1]] if rounds else [])
    if plans:
        print()
        print(plans)
