"""``pulse chaos``: run the fault-injection harness and report whether the guarantees held.

Exit 0 when the run passed, 1 on any safety violation, lost slot or bound exceeded, 2 on
bad options, 3 when the harness itself could not run (servers, binaries, nodes never
ready), 130 when interrupted (Ctrl-C or SIGTERM; servers and nodes are stopped first).
The work folder (node logs, witness file, server logs) is kept when a run fails.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from cluster.chaos.harness import ChaosOptions, ChaosRun
from cluster.chaos.plan import parse_kinds
from cluster.chaos.verdict.report import Report, render_table
from cluster.cli.base import PulseCommand, fail, settings_of
from cluster.errors import InvalidInput, PulseError
from cluster.timing.durations import parse_duration

FC = TypeVar("FC", bound=Callable[..., Any] | click.Command)


def _opt(*names: str, **kwargs: Any) -> Callable[[FC], FC]:
    """An option with its ``PULSE_CHAOS_*`` environment variable."""
    env = "PULSE_CHAOS_" + names[0].lstrip("-").replace("-", "_").upper()
    return click.option(*names, envvar=env, show_default=True, **kwargs)


@click.command("chaos", cls=PulseCommand)
@_opt("--nodes", type=click.IntRange(2, 64), default=5, help="Node processes.")
@_opt("--zones", type=click.IntRange(1, 26), default=3, help="Zones (nodes round-robin).")
@_opt("--duration", default="4m", help="Length of the fault phase.")
@_opt("--quiet", default="20s", help="Settling time after the last fault, before checks.")
@_opt("--seed", type=int, default=None, help="Seed of workload and faults [default: random].")
@_opt("--faults", default="all", help="Comma list of fault kinds, or all.")
@_opt("--jobs", type=click.IntRange(1, 100_000), default=300, help="Jobs in the workload.")
@_opt("--shards", type=click.IntRange(1, 4096), default=64, help="Shard count of the cluster.")
@_opt("--session-timeout", default="10s", help="Lock session timeout of every node.")
@_opt("--kill-bound", default="5s", help="Failover bound after SIGKILL and brief faults.")
@_opt("--stop-bound", default=None, help="Bound after a freeze past the session timeout, "
      "and after a stall if less than the kill bound + 5s [default: session timeout + kill "
      "bound].")  # fmt: skip
@_opt("--json", "json_path", default=None, metavar="FILE", help="Also write the report as "
      "JSON to FILE (- for stdout, the table then goes to stderr).")  # fmt: skip
@_opt("--external", is_flag=True, help="Use the configured Postgres and Redis (no restarts).")
@_opt("--pg-ha", is_flag=True, help="Postgres as a pg_auto_failover formation (a primary and "
      "its synchronous standby) on a multi-host URL; enables pg-failover.")  # fmt: skip
@_opt("--pg-async", is_flag=True, help="With --pg-ha: replicate asynchronously (a failover "
      "may lose the last claims and completions; see docs/failover.md).")  # fmt: skip
@_opt("--workdir", type=click.Path(file_okay=False), default=None, help="Keep logs here.")
@_opt("--keep", is_flag=True, help="Keep the work folder even when the run passes.")
@click.pass_context
def chaos(
    ctx: click.Context,
    nodes: int,
    zones: int,
    duration: str,
    quiet: str,
    seed: int | None,
    faults: str,
    jobs: int,
    shards: int,
    session_timeout: str,
    kill_bound: str,
    stop_bound: str | None,
    json_path: str | None,
    external: bool,
    pg_ha: bool,
    pg_async: bool,
    workdir: str | None,
    keep: bool,
) -> None:
    """Start a cluster, inject seeded faults, and check Pulse's guarantees held.

    Faults: sigkill, sigstop (a pause past the session timeout), sigstop-short, zone-kill,
    pg-stall, pg-blip (1.5 s), pg-terminate, redis-cut, redis-restart, pg-restart,
    poison-job (a job that kills every node that runs it), pg-failover (needs --pg-ha),
    redis-failover (Redis behind Sentinel). See docs/chaos.md and docs/failover.md.
    """
    try:
        options = ChaosOptions(
            seed=seed if seed is not None else random.randrange(1, 1_000_000),
            faults=parse_kinds(faults, external=external, pg_ha=pg_ha, pg_async=pg_async),
            nodes=nodes,
            zones=min(zones, nodes),
            duration_s=parse_duration(duration, "duration"),
            quiet_s=parse_duration(quiet, "quiet"),
            jobs=jobs,
            shards=shards,
            session_timeout_s=parse_duration(session_timeout, "session-timeout"),
            kill_bound_s=parse_duration(kill_bound, "kill-bound"),
            stop_bound_s=parse_duration(stop_bound, "stop-bound") if stop_bound else None,
            external=external,
            pg_ha=pg_ha,
            pg_async=pg_async,
            workdir=Path(workdir) if workdir else None,
            keep=keep,
        )
        harness = ChaosRun(options, settings_of(ctx) if external else None)
    except InvalidInput as exc:
        fail(f"invalid {exc}", 2)
    report: Report | None = None
    try:
        report = asyncio.run(harness.run())
    except PulseError as exc:
        fail(f"chaos run could not complete: {exc} (logs in {harness.workdir})", 3)
    except (KeyboardInterrupt, asyncio.CancelledError):
        fail(f"chaos run interrupted (logs in {harness.workdir})", 130)
    finally:
        kept = harness.cleanup(report)
    assert report is not None
    _emit(report, json_path)
    if kept:
        click.echo(f"logs: {harness.workdir}", err=True)
    sys.exit(0 if report.passed else 1)


def _emit(report: Report, json_path: str | None) -> None:
    table = render_table(report)
    if json_path == "-":
        click.echo(table, err=True)
        click.echo(json.dumps(report.to_json(), indent=2))
        return
    click.echo(table)
    if json_path:
        Path(json_path).write_text(json.dumps(report.to_json(), indent=2) + "\n", "utf-8")
