"""Reading jobs: ``pulse jobs list``, ``pulse jobs show`` (with its explained timeline and
outage plan) and ``pulse jobs graph``; ``cluster.cli.jobs`` owns the group and the commands
that change jobs."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import click

from cluster.cli.base import PulseCommand, emit_json, parse_time, tenant_option, with_store
from cluster.cli.jobs.timelines import print_steps
from cluster.cli.table import table
from cluster.errors import InvalidInput
from cluster.jobs import handlerrefs
from cluster.jobs.labels import parse_label
from cluster.jobs.models import Job, iso, shown
from cluster.store.jobstore.store import JobStore
from cluster.store.jobstore.timeline import outage_of, stopped
from cluster.timing.entries import is_union
from cluster.timing.instants import checked_instant

SHOW_SLOTS = 5


def _note(job: Job) -> str:
    """The job's pause note, and its `pause --until` while that time is ahead."""
    held = job.paused_until is not None and job.paused_until > datetime.now(UTC)
    until = f"paused until {iso(job.paused_until)}" if held else ""
    return "; ".join(n for n in (until, job.pause_note or "") if n)


def _schedule(job: Job) -> str:
    """The schedule as the list shows it: several are summed up (``show`` lists them)."""
    entries = job.parsed_schedule().entries if is_union(job.schedule) else ()
    return f"{len(entries)} schedules" if entries else job.schedule


def _summary(job: Job) -> str:
    """The first line of the job's description, as the list shows it."""
    return (job.description or "").split("\n", 1)[0]


def _when(job: Job) -> str:
    when = shown(job.next_run_at)
    return when.strftime("%Y-%m-%d %H:%M:%S%z") if when else "-"


@click.command("list", cls=PulseCommand)
@click.option("--tenant", default=None, help="Only this tenant.")
@click.option(
    "--label", "label_args", multiple=True, help="Only jobs with this key=value (repeatable)."
)
@click.option("--json", "as_json", is_flag=True)
@with_store
async def list_jobs(
    store: JobStore, tenant: str | None, label_args: tuple[str, ...], as_json: bool
) -> None:
    """List jobs."""
    wanted = dict(parse_label(text) for text in label_args)
    found = await store.jobs(tenant, wanted)
    if as_json:
        emit_json([job.to_json() for job in found])
        return
    header = ["TENANT", "NAME", "SCHEDULE", "TZ", "STATUS", "NEXT RUN", "HANDLER"]
    body = [
        [
            j.tenant,
            j.name,
            _schedule(j),
            j.tz,
            j.status,
            _when(j),
            handlerrefs.describe(j.handler)[0],
        ]
        for j in found
    ]
    # Columns only some jobs fill come last, and only when one does.
    extras = [("NOTE", [_note(j) for j in found]), ("DESCRIPTION", [_summary(j) for j in found])]
    for title, values in extras:
        if any(values):
            header.append(title)
            for row, value in zip(body, values, strict=True):
                row.append(value)
    table([header, *body])
    if not found:
        click.echo("no jobs")


@click.command("show", cls=PulseCommand)
@click.argument("name")
@tenant_option
@click.option(
    "--explain", is_flag=True, help="Each slot's fate with DST, calendar, window, jitter."
)
@click.option("--after", default=None, help="With --explain: from this ISO 8601 time [now].")
@click.option(
    "--count", type=click.IntRange(1, 1000), default=SHOW_SLOTS * 2, show_default=True,
    help="With --explain: this many runs.",
)  # fmt: skip
@click.option("--outage", default=None, help="FROM..TO: what catch-up does after such an outage.")
@click.option("--json", "as_json", is_flag=True)
@with_store
async def show_job(
    store: JobStore,
    name: str,
    tenant: str,
    explain: bool,
    after: str | None,
    count: int,
    outage: str | None,
    as_json: bool,
) -> None:
    """Show one job, its next slots and its latest runs (or its timeline explained)."""
    if after is not None and not explain:
        raise InvalidInput("after", "goes with --explain")
    if outage is not None:
        start, _, end = outage.partition("..")
        begin, until = parse_time(start, "outage"), parse_time(end or None, "outage")
        if begin is None or until is None:
            raise InvalidInput("outage", "give FROM..TO, two ISO 8601 times with offsets")
        print_steps(outage_of(await store.get(name, tenant), begin, until), as_json)
        return
    if explain:
        since = checked_instant(parse_time(after, "after"), "after")
        job, steps = await store.explain(name, tenant, after=since, count=count)
        state = stopped(job, await store.db_now())
        if state is not None and not as_json:
            click.echo(state)
        print_steps(steps, as_json, empty=state is None)
        return
    data = await store.details(name, tenant, slots=SHOW_SLOTS)
    if as_json:
        emit_json(data)
        return
    upcoming, recent = data.pop("next_slots"), data.pop("recent_runs")
    starts = data.pop("next_starts")
    reasons = data.pop("next_reasons", None) or [None] * len(upcoming)
    skipped = data.pop("calendar_skips", None) or []
    entries = data.pop("next_entries", None) or [None] * len(upcoming)
    data.pop("schedules", None)  # the schedule text says it all
    for key, value in data.items():
        if key == "handler":  # an http: or celery: handler: its summary, then its options
            first, *more = handlerrefs.describe(value)
            click.echo(f"{'handler:':<18}{first}")
            for line in more:
                click.echo(f"{'':<20}{line}")
            continue
        if key == "health":  # last success, next slot, expectation state
            click.echo(f"{'health:':<18}{_health(value)}")
            continue
        if key == "key_wait":  # a slot waiting for a named limit
            wait = "-" if value is None else f"key {value['key']} since {value['since']}"
            wait += "" if value is None else f" (slot {value['slot']})"
            click.echo(f"{'waiting:':<18}{wait}")
            continue
        shown = json.dumps(value, ensure_ascii=False) if isinstance(value, dict) else value
        if isinstance(value, list):  # upstreams, downstreams
            shown = ", ".join(value) or None
        click.echo(f"{key + ':':<18}{'-' if shown is None else shown}")
    click.echo("next slots:" if upcoming else "next slots: none")
    lines: list[tuple[datetime, str]] = []
    for slot, start, why, entry in zip(upcoming, starts, reasons, entries, strict=True):
        line = f"  {slot}" if start == slot else f"  {slot}  starts {start}"
        line += f"  [schedule {entry}]" if entry else ""
        lines.append((datetime.fromisoformat(slot), line + (f"  ({why})" if why else "")))
    for skip in skipped:
        line = f"  {skip['slot']}  skipped ({skip['reason']})"
        lines.append((datetime.fromisoformat(skip["slot"]), line))
    for _, line in sorted(lines, key=lambda pair: pair[0]):  # one timeline, in slot order
        click.echo(line)
    click.echo("recent runs:" if recent else "recent runs: none")
    for run in recent:
        node = run["node_id"] or "-"
        line = f"  {run['scheduled_for']}  {run['status']:<9} attempt {run['attempt']}  {node}"
        if data.get("each_node") and run["error"]:  # "2/3, node n2 missed (died 14:02:11)"
            line += f"  {run['error']}"
        click.echo(line)


def _health(h: dict[str, Any]) -> str:
    state = h["state"] or "-"
    if h["state_at"]:
        state += f" since {h['state_at']}"
    return f"last success {h['last_success'] or '-'}, next slot {h['next_slot'] or '-'}, " + (
        f"expectations {state}"
    )


@click.command("graph", cls=PulseCommand)
@tenant_option
@click.option("--dot", is_flag=True, help="Print Graphviz DOT instead of text.")
@click.option("--json", "as_json", is_flag=True, help="Print the edges as JSON.")
@with_store
async def graph_jobs(store: JobStore, tenant: str, dot: bool, as_json: bool) -> None:
    """Print the dependencies between a tenant's jobs (upstream -> downstream)."""
    edges = await store.graph(tenant)
    if as_json:
        emit_json(edges)
    elif dot:
        click.echo(f"digraph {json.dumps(tenant)} {{")
        for e in edges:
            label = json.dumps(e["match"])
            click.echo(
                f"  {json.dumps(e['upstream'])} -> {json.dumps(e['downstream'])} [label={label}];"
            )
        click.echo("}")
    elif not edges:
        click.echo(f"no dependencies in tenant {tenant}")
    for e in [] if as_json or dot else edges:
        click.echo(f"{e['upstream']} -> {e['downstream']}  ({e['match']})")
