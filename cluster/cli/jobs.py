"""``pulse jobs ...`` and ``pulse runs``: manage jobs and read their run history."""

from __future__ import annotations

import os
from typing import Any

import click

from cluster.cli import jobhistory, jobplans, jobviews, triggers, watching
from cluster.cli.audited import os_user
from cluster.cli.base import (
    PulseGroup,
    duration_option,
    emit_json,
    fail,
    parse_time,
    tenant_option,
    with_store,
)
from cluster.cli.expectations import expectation_options
from cluster.errors import InvalidInput
from cluster.jobs import fields, handlerrefs, shellrefs
from cluster.jobs.files import load_specs
from cluster.jobs.models import Job, iso
from cluster.jobs.registry import export_yaml, handlers_of, load_modules, specs_of
from cluster.jobs.spec import JobSpec
from cluster.jobs.timerules import DEFAULT_ON_EXCLUDED
from cluster.store.jobs import JobStore


@click.group(cls=PulseGroup)
def jobs() -> None:
    """Create, list and control jobs."""


for _command in (*jobviews.COMMANDS, *jobhistory.COMMANDS, triggers.trigger_job):
    jobs.add_command(_command)


@jobs.command("add")
@click.argument("name")
@click.option(
    "--schedule",
    "schedules",
    multiple=True,
    help="Cron (5 or 6 fields), @hourly..., @every 30s; repeat for several (their union).",
)
@click.option("--max-runs", default=None, help="The job is done after this many runs.")
@click.option("--label", "labels", multiple=True, help="A key=value label (repeatable).")
@click.option("--at", default=None, help="Run once at this ISO 8601 time with offset (@at).")
@click.option("--remove-when-done", is_flag=True, help="Delete a one-off job once it has run.")
@click.option(
    "--handler",
    default=None,
    help="package.module:function, shell:<command>, http:METHOD URL or celery:<task> "
    "(a --watch job: what Pulse runs once adopted).",
)
@click.option(
    "--watch", is_flag=True, help="Never run: record the pings of a cron Pulse does not run."
)
@watching.web_url_option
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
@click.option("--tz", default=fields.DEFAULT_TZ, show_default=True, help="IANA time zone.")
@click.option("--payload", default=None, help="A JSON object passed to the handler.")
@click.option(
    "--payload-schema", default=None, help="A JSON Schema every payload of the job must match."
)
@tenant_option
@click.option(
    "--catch-up", default=fields.DEFAULT_CATCH_UP, show_default=True, help="skip | once | backfill"
)
@duration_option("--grace", fields.DEFAULT_GRACE_S, "Lateness tolerated by skip.")
@click.option(
    "--max-backfill",
    default=str(fields.DEFAULT_MAX_BACKFILL),
    show_default=True,
    help="Backfill cap.",
)
@duration_option("--timeout", fields.DEFAULT_TIMEOUT_S, "Per-run time limit.")
@click.option(
    "--retries", default=str(fields.DEFAULT_RETRIES), show_default=True, help="Retries of a slot."
)
@duration_option("--retry-backoff", fields.DEFAULT_RETRY_BACKOFF_S, "First retry delay.")
@click.option(
    "--dst-repeated", default=fields.DEFAULT_DST_REPEATED, show_default=True, help="once | twice"
)
@click.option(
    "--dst-skipped", default=fields.DEFAULT_DST_SKIPPED, show_default=True, help="shift | skip"
)
@click.option("--keep-for", default=None, help="Keep runs this long [default: cluster config].")
@click.option("--keep-runs", default=None, help="Keep at most N runs [default: cluster config].")
@click.option(
    "--output-limit",
    default=f"{fields.DEFAULT_OUTPUT_LIMIT // 1024}KiB",
    show_default=True,
    help="Output kept per stream of a run (at most 256KiB).",
)
@duration_option("--late-after", fields.DEFAULT_LATE_AFTER_S, "Alert when a slot starts this late.")
@click.option("--pause-after-failures", default=None, help="Pause after N failed slots in a row.")
@click.option(
    "--overlap",
    default=fields.DEFAULT_OVERLAP,
    show_default=True,
    help="A slot due while the last runs: forbid (waits) | allow (runs too) | replace.",
)
@click.option("--max-concurrent", default=None, help="Slots in flight at once (overlap allow).")
@duration_option("--cancel-grace", fields.DEFAULT_CANCEL_GRACE_S, "SIGTERM to SIGKILL on cancel.")
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
@expectation_options
@click.option("--json", "as_json", is_flag=True, help="Print the job as JSON.")
@with_store
async def add_job(store: JobStore, name: str, as_json: bool, web_url: str, **options: Any) -> None:
    """Create a job."""
    if options["handler"] is None and not options["watch"]:
        raise click.UsageError("Missing option '--handler' (or --watch for a watch job).")
    handler = handlerrefs.with_celery_options(
        options.pop("handler") or "", options.pop("celery_broker"), options.pop("celery_wait")
    )
    handler = shellrefs.with_env(handler, options.pop("env_names"))
    given, at = options.pop("schedules"), options.pop("at")
    if not given and at is None:
        raise click.UsageError("Missing option '--schedule' (or '--at' for a one-off job).")
    if given and at is not None:
        raise click.UsageError("give --schedule or --at, not both.")
    schedule: str | list[str] = f"@at {at}" if at is not None else list(given)
    if len(given) == 1:
        schedule = given[0]
    spec = JobSpec.build(name, schedule, handler, **options)
    handlerrefs.require_broker(spec.handler, os.environ)
    token = None
    async with store.transaction():
        job = await store.add(spec)
        if spec.watch:
            token = await store.ping_token(spec.name, spec.tenant)
    url = None if token is None else watching.ping_url(web_url, token)
    if as_json:
        emit_json({**job.to_json(), **({} if url is None else {"ping_url": url})})
        return
    if url is None:
        click.echo(f"created {job.name} (tenant {job.tenant}); next run {_next_run(job)}")
    else:
        click.echo(
            f"created watch job {job.name} (tenant {job.tenant}); next ping due by {_next_run(job)}"
        )
        watching.show_ping_url(url)


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
@click.option("--plan", "plan_only", is_flag=True, help="Print what would change; write nothing.")
@click.option(
    "--plan-file",
    default=None,
    type=click.Path(dir_okay=False),
    help="Apply only if no job changed since this `--plan --json` output was made.",
)
@click.option(
    "--expect-revision",
    "expect",
    multiple=True,
    help="[TENANT/]NAME=REV: apply only if the job is at this revision (0: absent).",
)
@click.option("--json", "as_json", is_flag=True)
@with_store
async def apply_jobs(
    store: JobStore,
    file: str | None,
    modules: tuple[str, ...],
    prune: bool,
    plan_only: bool,
    plan_file: str | None,
    expect: tuple[str, ...],
    as_json: bool,
) -> None:
    """Create or update the jobs of a YAML or JSON file, or of the registries of Python
    modules (idempotent, all or nothing), or with --plan say what that would change."""
    specs, handlers = _specs(file, modules)
    for position, entry in enumerate(specs, 1):
        try:
            handlerrefs.require_broker(entry.handler, os.environ)
        except InvalidInput as exc:
            raise InvalidInput("file", f"entry {position} ({entry.name}): {exc}") from exc
    await store.act_as(os_user(), "module" if modules else "file")
    if plan_only:
        jobplans.print_plan(await store.plans.plan(specs, prune=prune), as_json)
        return
    expected = jobplans.expectations(specs, prune, plan_file, expect)
    async with store.transaction():
        result = await store.apply(specs, prune=prune, expect=expected)
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


def _next_run(job: Job) -> str:
    if job.status == "done":
        return "none (done: its one slot has run)"
    return iso(job.next_run_at) or "none while paused"


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
        else:
            await store.remove(name, tenant)
            click.echo(f"removed {name} (tenant {tenant})")
            return
        _done("resumed", job)

    docs = {
        "resume": "Resume a paused job at its next future slot.",
        "remove": "Delete a job and its run history.",
    }
    command.__doc__ = docs[verb]
    return jobs.command(verb)(command)


for _verb in ("resume", "remove"):
    _control(_verb)


__all__ = ["jobs"]
