"""The ``pulse`` root group: the options every command shares, ``pulse init``, and the
command modules attached in one place, so they import this package's helpers one way.

``node/cli.py`` adds ``pulse node`` (the only command that runs node code) to this group.
"""

from __future__ import annotations

import click

from cluster.cli import (
    alerts,
    backfills,
    calendars,
    chaos,
    config,
    handlers,
    jobs,
    runs,
    schedule,
    status,
    tenants,
    tokens,
    up,
    web,
    windows,
)
from cluster.cli.base import PulseGroup, fail, global_options, with_store
from cluster.errors import ConfigError
from cluster.settings import DEFAULT_SHARDS
from cluster.store import JobStore


@click.group(
    cls=PulseGroup,
    params=global_options(),
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(package_name="pulsecron", prog_name="pulse")
def cli() -> None:
    """Pulse: a distributed cron scheduler on Postgres and Redis."""


@cli.command()
@click.option(
    "--shards",
    type=int,
    envvar="PULSE_SHARDS",
    default=None,
    help=f"Number of shards, fixed at the first init [default {DEFAULT_SHARDS}].",
)
@with_store
async def init(store: JobStore, shards: int | None) -> None:
    """Create or upgrade the database schema (safe to repeat)."""
    try:
        result = await store.init(shards)
    except ConfigError as exc:  # an applied migration's file was edited: nothing written
        fail(str(exc), 2)
    applied = ", ".join(f"{v:03d}" for v in result.applied) or "none"
    click.echo(
        f"schema {store.settings.schema} at version {result.version} "
        f"(applied: {applied}); {result.shards} shards"
    )


for command in (
    jobs.jobs,
    alerts.alerts,
    runs.runs,
    config.config,
    schedule.schedule_command,
    status.status,
    up.up,
    chaos.chaos,
    tokens.tokens,
    tokens.audit,
    web.web,
    backfills.backfills,
    tenants.tenants,
    handlers.handlers,
    calendars.calendars,
    windows.windows,
):
    cli.add_command(command)
jobs.jobs.add_command(backfills.backfill_job)
