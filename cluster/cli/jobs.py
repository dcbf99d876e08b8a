"""``pulse jobs ...`` and ``pulse runs``: manage jobs and read their run history."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from typing import Any

import click

from cluster.cli.base import (
    PulseGroup,
    duration_option,
    emit_json,
    fail,
    parse_time,
    with_store,
)
from cluster.cli.timelines import print_steps
from cluster.errors import InvalidInput
from cluster.jobs import handlerrefs, shellrefs, spec
from cluster.jobs.files import load_specs
from cluster.jobs.models import Job, iso
from cluster.jobs.registry import export_yaml, handlers_of, load_modules, specs_of
from cluster.jobs.spec import JobSpec
from cluster.jobs.timerules import DEFAULT_ON_EXCLUDED
from cluster.store.jobs import JobStore
from cluster.store.timeline import explain_job, outage_of

SHOW_SLOTS = 5


@click.group(cls=PulseGroup)
def jobs() -> None:
    """Create, list and control jobs."""


tenant_option = click.option(
    "--tenant", default=spec.DEFAULT_TENANT, show_default=True, help="Tenant the job belongs to."
)


@jobs.command("add")
@click.argument("name")
@click.option("--schedule", default=None, help="Cron (5 or 6 fields), @hourly..., @every 30s.")
@click.option("--at", default=None, help="Run once at this ISO 8601 time with offset (@at).")
@click.option("--remove-when-done", is_flag=True, help="Delete a one-off job once it has run.")
@click.option(
    "--handler",
    required=True,
    help="package.module:function, shell:<command>, http:METHOD URL or celery:<task>.",
)
@click.option(
    "--celery-broker",
    default=None,
    help="Broker URL of a celery: handler (write secrets as ${env:NAME}) "
    "[default: the node's --celery-broker].",
)
@click.option("--celery-wait", is_flag=True, help="A celery: run waits for the task's result.")
@click.option(
    "--env",
    "env_names",
    multiple=True,
    help="A node environment variable a shell: job gets (repeatable; it gets no other).",
)
@click.option("--tz", default=spec.DEFAULT_TZ, show_default=True, help="IANA time zone.")
@click.option("--payload", default=None, help="A JSON object passed to the handler.")
@tenant_option
@click.option(
    "--catch-up", default=spec.DEFAULT_CATCH_UP, show_default=True, help="skip | once | backfill"
)
@duration_option("--grace", spec.DEFAULT_GRACE_S, "Lateness tolerated by skip.")
@click.option(
    "--max-backfill",
    default=str(spec.DEFAULT_MAX_BACKFILL),
    show_default=True,
    help="Backfill cap.",
)
@duration_option("--timeout", spec.DEFAULT_TIMEOUT_S, "Per-run time limit.")
@click.option(
    "--retries", default=str(spec.DEFAULT_RETRIES), show_default=True, help="Retries of a slot."
)
@duration_option("--retry-backoff", spec.DEFAULT_RETRY_BACKOFF_S, "First retry delay.")
@click.option(
    "--dst-repeated", default=spec.DEFAULT_DST_REPEATED, show_default=True, help="once | twice"
)
@click.option(
    "--dst-skipped", default=spec.DEFAULT_DST_SKIPPED, show_default=True, help="shift | skip"
)
@click.option("--keep-for", default=None, help="Keep runs this long [default: cluster config].")
@click.option("--keep-runs", default=None, help="Keep at most N runs [default: cluster config].")
@click.option(
    "--output-limit",
    default=f"{spec.DEFAULT_OUTPUT_LIMIT // 1024}KiB",
    show_default=True,
    help="Output kept per stream of a run (at most 256KiB).",
)
@duration_option("--late-after", spec.DEFAULT_LATE_AFTER_S, "Alert when a slot starts this late.")
@click.option("--pause-after-failures", default=None, help="Pause after N failed slots in a row.")
@click.option(
    "--overlap",
    default=spec.DEFAULT_OVERLAP,
    show_default=True,
    help="A slot due while the last runs: forbid (waits) | allow (runs too) | replace.",
)
@click.option("--max-concurrent", default=None, help="Slots in flight at once (overlap allow).")
@duration_option("--cancel-grace", spec.DEFAULT_CANCEL_GRACE_S, "SIGTERM to SIGKILL on cancel.")
@duration_option("--jitter", 0.0, "Each slot starts within [slot, slot + jitter).")
@click.option("--calendar", default=None, help="A business calendar (pulse calendars).")
@click.option(
    "--on-excluded",
    default=DEFAULT_ON_EXCLUDED,
    show_default=True,
    help="A slot on an excluded date: skip | next-business-day | previous-business-day.",
)
@click.option(
    "--business-day", default=None, help="Only the N-th business day of each month (-1: last)."
)
@click.option("--paused", is_flag=True, help="Create the job paused.")
@click.option("--zones", default=None, help="Run only on nodes of these zones (a,b).")
@click.option(
    "--each-zone", is_flag=True, help="Run each slot once in every zone with a live node."
)
@click.option("--after", default=None, help="Run a slot only after these jobs' (A,B) succeeded.")
@click.option(
    "--after-match",
    default="same",
    show_default=True,
    help="Which upstream slot: same | latest | period:day | period:hour.",
)
@click.option("--after-timeout", default=None, help="Skip a slot held this long [default: never].")
@click.option(
    "--after-failure",
    default="block",
    show_default=True,
    help="An upstream slot failed: block | run | skip.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the job as JSON.")
@with_store
async def add_job(store: JobStore, name: str, as_json: bool, **options: Any) -> None:
    """Create a job."""
    handler = handlerrefs.with_celery_options(
        options.pop("handler"), options.pop("celery_broker"), options.pop("celery_wait")
    )
    handler = shellrefs.with_env(handler, options.pop("env_names"))
    schedule, at = options.pop("schedule"), options.pop("at")
    if schedule is None and at is None:
        raise click.UsageError("Missing option '--schedule' (or '--at' for a one-off job).")
    if schedule is not None and at is not None:
        raise click.UsageError("give --schedule or --at, not both.")
    spec = JobSpec.build(name, schedule or f"@at {at}", handler, **options)
    handlerrefs.require_broker(spec.handler, os.environ)
    job = await store.add(spec)
    if as_json:
        emit_json(job.to_json())
    else:
        click.echo(f"created {job.name} (tenant {job.tenant}); next run {_next_run(job)}")


module_option = click.option(
    "--module",
    "modules",
    multiple=True,
    envvar="PULSE_JOB_MODULES",
    help="Use the pulsecron Registry objects of this module (repeatable) [env PULSE_JOB_MODULES].",
)


def _specs(
    file: str | None, modules: tuple[str, ...]
) -> tuple[list[JobSpec], list[tuple[str, str]]]:
    """The jobs of FILE or of the registries of ``--module``s (exactly one of the two), and
    the (tenant, handler) pairs the registries offer to the HTTP API."""
    if file is not None and modules:
        raise InvalidInput("jobs", "give a FILE or --module, not both")
    if file is None and not modules:
        raise InvalidInput("jobs", "give a FILE or --module MODULE")
    if file is not None:
        return load_specs(file), []
    registries = load_modules(modules)
    return specs_of(registries), handlers_of(registries)


@jobs.command("apply")
@click.argument("file", type=click.Path(dir_okay=False), required=False)
@module_option
@click.option("--prune", is_flag=True, help="Remove jobs that are not in FILE or the modules.")
@click.option("--json", "as_json", is_flag=True)
@with_store
async def apply_jobs(
    store: JobStore, file: str | None, modules: tuple[str, ...], prune: bool, as_json: bool
) -> None:
    """Create or update the jobs of a YAML or JSON file, or of the registries of Python
    modules (idempotent, all or nothing)."""
    specs, handlers = _specs(file, modules)
    for position, entry in enumerate(specs, 1):
        try:
            handlerrefs.require_broker(entry.handler, os.environ)
        except InvalidInput as exc:
            raise InvalidInput("file", f"entry {position} ({entry.name}): {exc}") from exc
    async with store.transaction():
        result = await store.apply(specs, prune=prune)
        await store.handlers.register(handlers, "pulse jobs apply")
    if as_json:
        emit_json(
            {
                "created": result.created,
                "updated": result.updated,
                "unchanged": result.unchanged,
                "removed": result.removed,
            }
        )
        return
    if not result.changed:
        click.echo(f"no changes ({len(result.unchanged)} jobs unchanged)")
        return
    for verb, names in (
        ("created", result.created),
        ("updated", result.updated),
        ("removed", result.removed),
    ):
        for label in names:
            click.echo(f"{verb} {label}")
    click.echo(
        f"{len(result.created)} created, {len(result.updated)} updated, "
        f"{len(result.removed)} removed, {len(result.unchanged)} unchanged"
    )


@jobs.command("export")
@module_option
def export_jobs(modules: tuple[str, ...]) -> None:
    """Print the jobs of the registries of Python modules as a job file."""
    if not modules:
        fail("invalid module: give at least one --module MODULE", 2)
    try:
        registries = load_modules(modules)
        specs_of(registries)
    except InvalidInput as exc:
        fail(f"invalid {exc}", 2)
    click.echo(export_yaml(registries), nl=False)


def table(rows: list[list[str]]) -> None:
    if not rows:
        return
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def _note(job: Job) -> str:
    """The job's pause note, and its `pause --until` while that time is ahead."""
    held = job.paused_until is not None and job.paused_until > datetime.now(UTC)
    until = f"paused until {iso(job.paused_until)}" if held else ""
    return "; ".join(n for n in (until, job.pause_note or "") if n)


def _when(job: Job) -> str:
    return job.next_run_at.strftime("%Y-%m-%d %H:%M:%S%z") if job.next_run_at else "-"


def _next_run(job: Job) -> str:
    if job.status == "done":
        return "none (done: its one slot has run)"
    return iso(job.next_run_at) or "none while paused"


@jobs.command("list")
@click.option("--tenant", default=None, help="Only this tenant.")
@click.option("--json", "as_json", is_flag=True)
@with_store
async def list_jobs(store: JobStore, tenant: str | None, as_json: bool) -> None:
    """List jobs."""
    found = await store.jobs(tenant)
    if as_json:
        emit_json([job.to_json() for job in found])
        return
    header = ["TENANT", "NAME", "SCHEDULE", "TZ", "STATUS", "NEXT RUN", "HANDLER"]
    body = [
        [j.tenant, j.name, j.schedule, j.tz, j.status, _when(j), handlerrefs.describe(j.handler)[0]]
        for j in found
    ]
    notes = [_note(j) for j in found]
    if any(notes):
        header.append("NOTE")
        for row, note in zip(body, notes, strict=True):
            row.append(note)
    table([header, *body])
    if not found:
        click.echo("no jobs")


@jobs.command("show")
@click.argument("name")
@tenant_option
@click.option(
    "--explain", is_flag=True, help="Each coming slot with DST, calendar, window, jitter."
)
@click.option("--outage", default=None, help="FROM..TO: what catch-up does after such an outage.")
@click.option("--json", "as_json", is_flag=True)
@with_store
async def show_job(
    store: JobStore, name: str, tenant: str, explain: bool, outage: str | None, as_json: bool
) -> None:
    """Show one job, its next slots and its latest runs (or its timeline explained)."""
    if explain or outage is not None:
        job = await store.get(name, tenant)
        if outage is not None:
            start, _, end = outage.partition("..")
            begin, until = parse_time(start, "outage"), parse_time(end or None, "outage")
            if begin is None or until is None:
                raise InvalidInput("outage", "give FROM..TO, two ISO 8601 times with offsets")
            steps = outage_of(job, begin, until)
        else:
            steps = explain_job(job, await store.db_now(), SHOW_SLOTS * 2)
        print_steps(steps, as_json)
        return
    data = await store.details(name, tenant, slots=SHOW_SLOTS)
    if as_json:
        emit_json(data)
        return
    upcoming, recent = data.pop("next_slots"), data.pop("recent_runs")
    starts = data.pop("next_starts")
    reasons = data.pop("next_reasons", None) or [None] * len(upcoming)
    skipped = data.pop("calendar_skips", None) or []
    for key, value in data.items():
        if key == "handler":  # an http: or celery: handler: its summary, then its options
            first, *more = handlerrefs.describe(value)
            click.echo(f"{'handler:':<18}{first}")
            for line in more:
                click.echo(f"{'':<20}{line}")
            continue
        shown = json.dumps(value, ensure_ascii=False) if isinstance(value, dict) else value
        if isinstance(value, list):  # upstreams, downstreams
            shown = ", ".join(value) or None
        click.echo(f"{key + ':':<18}{'-' if shown is None else shown}")
    click.echo("next slots:" if upcoming else "next slots: none")
    for slot, start, why in zip(upcoming, starts, reasons, strict=True):
        line = f"  {slot}" if start == slot else f"  {slot}  starts {start}"
        click.echo(line + (f"  ({why})" if why else ""))
    for skip in skipped:
        click.echo(f"  {skip['slot']}  skipped ({skip['reason']})")
    click.echo("recent runs:" if recent else "recent runs: none")
    for run in recent:
        node = run["node_id"] or "-"
        click.echo(f"  {run['scheduled_for']}  {run['status']:<9} attempt {run['attempt']}  {node}")


@jobs.command("graph")
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


def _done(verb: str, job: Job) -> None:
    click.echo(f"{verb} {job.name} (tenant {job.tenant}): {job.status}, next run {_next_run(job)}")


@jobs.command("pause")
@click.argument("name")
@tenant_option
@click.option("--note", default=None, help="Why it is paused (shown by list, show, status).")
@click.option("--until", default=None, help="Resume by itself at this ISO 8601 time (with offset).")
@with_store
async def pause_job(
    store: JobStore, name: str, tenant: str, note: str | None, until: str | None
) -> None:
    """Stop scheduling a job (a running slot finishes), or until --until."""
    if until is None:
        _done("paused", await store.pause(name, tenant, note=note))
        return
    moment = parse_time(until, "until")
    assert moment is not None
    await store.holds.pause_until(name, tenant, moment, note=note)
    _done(f"paused until {moment.isoformat()}", await store.get(name, tenant))


@jobs.command("skip-next")
@click.argument("name")
@tenant_option
@click.option("--count", default=1, show_default=True, type=int, help="How many runs to skip.")
@with_store
async def skip_next(store: JobStore, name: str, tenant: str, count: int) -> None:
    """Record a job's next runs skipped; it continues at the one after them."""
    skipped = await store.holds.skip_next(name, tenant, count)
    for slot in skipped:
        click.echo(f"skipped {slot.isoformat()}")
    _done("skipping", await store.get(name, tenant))


def _control(verb: str) -> click.Command:
    @click.argument("name")
    @tenant_option
    @with_store
    async def command(store: JobStore, name: str, tenant: str) -> None:
        if verb == "resume":
            job = await store.resume(name, tenant)
        elif verb == "trigger":
            job = await store.trigger(name, tenant)
        else:
            await store.remove(name, tenant)
            click.echo(f"removed {name} (tenant {tenant})")
            return
        _done({"resume": "resumed", "trigger": "triggered"}[verb], job)

    docs = {
        "resume": "Resume a paused job at its next future slot.",
        "trigger": "Run a job now, keeping its regular schedule.",
        "remove": "Delete a job and its run history.",
    }
    command.__doc__ = docs[verb]
    return jobs.command(verb)(command)


for _verb in ("resume", "trigger", "remove"):
    _control(_verb)


__all__ = ["jobs", "table"]
