"""``pulse jobs add``: one job from command-line options."""

from __future__ import annotations

import os
from typing import Any

import click

from cluster.cli.base import (
    PulseCommand,
    duration_option,
    emit_json,
    tenant_option,
    with_store,
)
from cluster.cli.jobs import watching
from cluster.cli.jobs.control import next_run
from cluster.cli.jobs.expectations import expectation_options
from cluster.jobs import fields, handlerrefs, shellrefs
from cluster.jobs.spec import JobSpec
from cluster.jobs.timerules import DEFAULT_ON_EXCLUDED
from cluster.store.jobstore.store import JobStore


@click.command("add", cls=PulseCommand)
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
        job = await store.definitions.add(spec)
        if spec.watch:
            token = await store.ping_token(spec.name, spec.tenant)
    url = None if token is None else watching.ping_url(web_url, token)
    if as_json:
        emit_json({**job.to_json(), **({} if url is None else {"ping_url": url})})
        return
    if url is None:
        click.echo(f"created {job.name} (tenant {job.tenant}); next run {next_run(job)}")
    else:
        click.echo(
            f"created watch job {job.name} (tenant {job.tenant}); next ping due by {next_run(job)}"
        )
        watching.show_ping_url(url)
