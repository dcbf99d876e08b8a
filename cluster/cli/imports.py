"""``pulse import ...``: crontabs, Celery beat schedules and Kubernetes CronJobs written as
Pulse job files (``cluster.importers``).

The job file goes to stdout or ``--out FILE``; what could not be mapped goes to stderr, one
line each, so nothing is dropped silently. Nothing mapped: exit 2 and nothing written. The
file is not applied: review it, then ``pulse jobs apply FILE``.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from cluster.cli.base import PulseGroup, fail
from cluster.errors import InvalidInput
from cluster.importers.beat import import_beat
from cluster.importers.cronjobs import import_cronjobs
from cluster.importers.crontabs import import_crontab
from cluster.importers.imported import WATCH_NOTE, Imported, Options
from cluster.jobs.fields import DEFAULT_TENANT


@click.group("import", cls=PulseGroup)
def import_group() -> None:
    """Write Pulse job files from crontabs, Celery beat and Kubernetes CronJobs."""


def _options(fn: Callable[..., Any]) -> Callable[..., Any]:
    @click.option("--out", "out", default=None, help="Write the job file here (default stdout).")
    @click.option("--tenant", default=DEFAULT_TENANT, show_default=True, help="Tenant of the jobs.")
    @click.option("--prefix", default="", help="Put this before every job's name.")
    @click.option("--watch", is_flag=True, help="Watch jobs (pinged by the legacy crons).")
    @functools.wraps(fn)
    def wrapper(**kwargs: Any) -> None:
        fn(**kwargs)

    return wrapper


def _read(path: str) -> tuple[str, str]:
    if path == "-":
        return sys.stdin.read(), "stdin"
    try:
        return Path(path).read_text("utf-8"), path
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise InvalidInput("file", f"cannot read {path}: {reason}") from exc


def _finish(produce: Callable[[Options], Imported], out: str | None, **kwargs: Any) -> None:
    try:
        result = produce(Options(kwargs["tenant"], kwargs["prefix"], kwargs["watch"]))
    except InvalidInput as exc:
        fail(f"invalid {exc}", 2)
    for line in result.problems:
        click.echo(f"not mapped: {line}", err=True)
    if result.options.watch and result.jobs:
        click.echo(f"note: {WATCH_NOTE}", err=True)
    if not result.jobs:
        fail(f"nothing in {result.source} could be mapped to a job", 2)
    text = result.job_file()
    if out is None:
        click.echo(text, nl=False)
    else:
        try:
            Path(out).write_text(text, "utf-8")
        except OSError as exc:
            fail(f"invalid out: cannot write {out}: {exc.strerror}", 2)
    skipped = f", {len(result.problems)} not mapped (listed above)" if result.problems else ""
    click.echo(f"imported {len(result.jobs)} jobs from {result.source}{skipped}", err=True)


@import_group.command("crontab")
@click.argument("file")
@click.option(
    "--system", is_flag=True, help="Lines have a user field (/etc/crontab, /etc/cron.d/*)."
)
@_options
def crontab(file: str, system: bool, out: str | None, **kwargs: Any) -> None:
    """A crontab (FILE, or - for stdin: `crontab -l | pulse import crontab -`)."""

    def produce(options: Options) -> Imported:
        text, source = _read(file)
        return import_crontab(text, source, options, system=system)

    _finish(produce, out, **kwargs)


@import_group.command("celery-beat")
@click.argument("module")
@click.option(
    "--broker",
    default=None,
    help="Broker of the celery: jobs (a celery.brokers name, ${env:NAME}).",
)
@_options
def celery_beat(module: str, broker: str | None, out: str | None, **kwargs: Any) -> None:
    """The beat_schedule of a Celery app, imported by name (proj.celery or proj.celery:app)."""
    _finish(lambda options: import_beat(module, options, broker), out, **kwargs)


@import_group.command("k8s-cronjob")
@click.argument("file")
@_options
def k8s_cronjob(file: str, out: str | None, **kwargs: Any) -> None:
    """Kubernetes batch/v1 CronJob manifests (FILE, or -; several YAML documents allowed)."""

    def produce(options: Options) -> Imported:
        text, source = _read(file)
        return import_cronjobs(text, source, options)

    _finish(produce, out, **kwargs)
