"""``pulse status``: the cluster on one screen, for people (text) and scripts (``--json``).

Exit code 0 when healthy, 1 when a shard is unheld or no node is alive, so the command
doubles as a health check. ``--watch`` redraws in place (one JSON object per line with
``--json``) and remembers how long each shard has been unheld.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys

import click

from cluster.cli.base import PulseCommand, duration_option, run, seconds, settings_of
from cluster.health.status import Status, UnheldTracker, collect
from cluster.jobs.models import iso
from cluster.settings import DEFAULT_HEARTBEAT_TTL_S, ClusterSettings
from cluster.timing.durations import format_duration

CLEAR = "\x1b[H\x1b[2J"
WATCH_INTERVAL_S = 2.0


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.0f}ms" if value < 10 else format_duration(value)


def _ranges(shards: list[int]) -> str:
    """[1, 2, 3, 7] -> '1-3, 7'"""
    parts: list[str] = []
    start = prev = None
    for s in [*shards, None]:
        if start is not None and (s is None or prev is None or s != prev + 1):
            parts.append(str(start) if start == prev else f"{start}-{prev}")
            start = None
        if s is not None and start is None:
            start = s
        prev = s
    return ", ".join(parts)


def _pinned_by_zone(st: Status, shown: int = 8) -> dict[str, str]:
    """Per zone, the pinned jobs it may run (at most ``shown`` named)."""
    names: dict[str, list[str]] = {}
    for p in st.pinned:
        for zone in p.zones:
            names.setdefault(zone, []).append(f"{p.tenant}/{p.name}")
    return {
        zone: ", ".join(jobs[:shown])
        + (f" and {len(jobs) - shown} more" if len(jobs) > shown else "")
        for zone, jobs in names.items()
    }


def render(st: Status) -> str:
    verdict = "HEALTHY" if st.healthy else "UNHEALTHY: " + "; ".join(st.problems)
    out = [
        f"cluster {st.cluster} (schema {st.schema}) at "
        f"{st.db_now.strftime('%Y-%m-%d %H:%M:%S %Z')}: {verdict}",
        "",
        f"members: {len(st.alive_nodes)} alive"
        + (f" by their shard locks ({st.members_error})" if st.members_error else ""),
    ]
    rows = [["NODE", "HEARTBEAT", "SHARDS", "IN FLIGHT", "VERSION", "HOST", "NOTE"]]
    zones: dict[str, list[list[str]]] = {}
    for m in st.members:
        zones.setdefault(m.zone, []).append(
            [
                m.node_id,
                f"{m.heartbeat_age_s:.1f}s ago",
                str(m.shards_held),
                f"{m.runs_in_flight}/{m.concurrency}",
                m.version,
                f"{m.host}:{m.pid}",
                "" if m.has_session else "no Postgres session (dead?)",
            ]
        )
    widths = [
        max(len(r[i]) for r in rows + [r for z in zones.values() for r in z]) for i in range(7)
    ]

    def line(cells: list[str]) -> str:
        return "    " + "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    if zones:
        out.append(line(rows[0]))
    carried = _pinned_by_zone(st)
    for zone in sorted(zones.keys() | carried.keys()):
        out.append(f"  zone {zone}" + ("" if zone in zones else ": no live node"))
        out.extend(line(r) for r in zones.get(zone, []))
        if zone in carried:
            out.append(f"    pinned: {carried[zone]}")
    unplaced = [f"{p.tenant}/{p.name}" for p in st.pinned if not p.placed]
    if unplaced:
        out.append(f"  unplaced (no live node in their zones): {', '.join(unplaced)}")
    for node, count in st.held_by_non_members.items():
        out.append(f"  {node}: holds {count} shards but has no live heartbeat")
    for node, count in st.in_flight_by_non_members.items():
        out.append(f"  {node}: {count} runs in flight but is not a member (recovery pending)")
    out.append("")
    unheld = "none"
    if st.unheld:
        since = "now" if st.unheld_for_s is None else f"for {format_duration(st.unheld_for_s)}"
        unheld = f"{len(st.unheld)} ({_ranges(st.unheld)}) {since}"
    out.append(f"shards: {st.shards_held}/{st.shard_count} held; unheld: {unheld}")
    if st.misplaced:
        shown = ", ".join(f"{m.shard} on {m.holder} (ring: {m.owner})" for m in st.misplaced[:8])
        more = f" and {len(st.misplaced) - 8} more" if len(st.misplaced) > 8 else ""
        out.append(f"  held off-ring ({len(st.misplaced)}, moves pending): {shown}{more}")
    oldest = f", oldest {_ms(st.backlog_oldest_s)} late" if st.backlog_due else ""
    out.append(f"backlog: {st.backlog_due} due jobs{oldest}")
    out.append(
        f"fire lag (last minute, {st.lag_samples} runs): "
        f"p50 {_ms(st.lag_p50_s)}, p99 {_ms(st.lag_p99_s)}"
    )
    o = st.outcomes_1h
    out.append(
        f"runs (last hour): {o['succeeded']} succeeded, {o['failed']} failed, "
        f"{o['timed_out']} timed out, {o['cancelled']} cancelled, {o['lost']} lost, "
        f"{o['skipped']} skipped, "
        f"{o['running']} running"
    )
    out.append(f"fenced writes (live nodes, since each started): {st.fenced_writes}")
    if st.paused_total:
        out.append(f"paused jobs ({st.paused_total}):")
        for job in st.paused_jobs:
            out.append(f"  {job.tenant}/{job.name}" + (f": {job.note}" if job.note else ""))
        if st.paused_total > len(st.paused_jobs):
            out.append(f"  ... and {st.paused_total - len(st.paused_jobs)} more")
    if st.done_jobs:
        out.append(f"done one-off jobs: {st.done_jobs} (kept until their runs are pruned)")
    if st.held_slots:
        oldest = "" if st.held_oldest is None else f", the oldest slot {iso(st.held_oldest)}"
        out.append(f"held slots: {st.held_slots} waiting for their upstreams{oldest}")
    return "\n".join(out)


async def _watch(
    settings: ClusterSettings, ttl_s: float, interval_s: float, as_json: bool, last: list[int]
) -> None:
    tracker = UnheldTracker()
    tty = sys.stdout.isatty()
    while True:
        st = await collect(settings, heartbeat_ttl_s=ttl_s, tracker=tracker)
        last[:] = [0 if st.healthy else 1]
        if as_json:
            click.echo(json.dumps(st.to_json(), ensure_ascii=False))
        else:
            click.echo((CLEAR if tty else "\n") + render(st))
        await asyncio.sleep(interval_s)


@click.command("status", cls=PulseCommand)
@click.option("--watch", is_flag=True, help="Refresh until Ctrl-C.")
@duration_option("--interval", WATCH_INTERVAL_S, "Refresh interval of --watch.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (one object per refresh).")
@duration_option(
    "--heartbeat-ttl",
    DEFAULT_HEARTBEAT_TTL_S,
    "Heartbeat age after which a node is not a member (as on the nodes).",
    envvar="PULSE_HEARTBEAT_TTL",
)
@click.pass_context
def status(
    ctx: click.Context, watch: bool, interval: str, as_json: bool, heartbeat_ttl: str
) -> None:
    """Members by zone, shard coverage, backlog, fire lag and outcomes; exit 1 if unhealthy."""
    settings = settings_of(ctx)
    ttl_s = seconds(heartbeat_ttl, "heartbeat-ttl")
    if watch:
        interval_s = seconds(interval, "interval")
        last = [1]
        with contextlib.suppress(KeyboardInterrupt):
            run(_watch(settings, ttl_s, interval_s, as_json, last))
        ctx.exit(last[0])
    st = run(collect(settings, heartbeat_ttl_s=ttl_s))
    if as_json:
        click.echo(json.dumps(st.to_json(), indent=2, ensure_ascii=False))
    else:
        click.echo(render(st))
    ctx.exit(0 if st.healthy else 1)
