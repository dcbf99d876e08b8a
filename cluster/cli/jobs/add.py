"""``pulse jobs add``: one job from command-line options, a flag for each job option
declared with its help (cluster/jobs/spec.py) beside the few the command reads itself:
the schedule or ``--at``, the handler and its Celery and environment options, the tenant."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

import click

from cluster.cli.base import PulseCommand, emit_json, tenant_option, with_store
from cluster.cli.jobs import watching
from cluster.cli.jobs.control import next_run
from cluster.jobs import handlerrefs, shellrefs
from cluster.jobs.spec import OPTIONS, JobSpec
from cluster.store.jobstore.store import JobStore

F = TypeVar("F", bound=Callable[..., Any])


def option_flags(command: F) -> F:
    """A flag for each job option declared with its help (``OPTIONS``: ``--grace 5m``,
    ``--paused``), under its key, its default the text --help shows; the command passes
    on those given or shown."""
    for d in reversed(OPTIONS.all):
        if d.option.help:
            flag = isinstance(d.default, bool)
            command = click.option(
                d.flag,
                d.key,
                default=False if flag else d.option.shown,
                is_flag=flag,
                multiple=d.option.multiple,
                show_default=d.option.shown is not None,
                help=d.option.help,
            )(command)
    return command


@click.command("add", cls=PulseCommand)
@click.argument("name")
@click.option(
    "--schedule",
    "schedules",
    multiple=True,
    help="Cron (5 or 6 fields), @hourly..., @every 30s; repeat for several (their union).",
)
@click.option("--at", default=None, help="Run once at this ISO 8601 time with offset (@at).")
@click.option(
    "--handler",
    default=None,
    help="package.module:function, shell:<command>, http:METHOD URL or celery:<task> "
    "(a --watch job: what Pulse runs once adopted).",
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
@tenant_option
@option_flags
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
    given = {k: v for k, v in options.items() if v is not None and v is not False and v != ()}
    spec = JobSpec.build(name, schedule, handler, **given)
    handlerrefs.require_broker(spec.handler, os.environ)
    token = None
    async with store.transaction():
        job = await store.definitions.add(spec)
        if spec.watch:
            token = await store.watch.token(spec.name, spec.tenant)
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
