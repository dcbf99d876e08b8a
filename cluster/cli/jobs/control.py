"""Controlling a job's slots: ``pulse jobs pause`` (for good or ``--until``), ``skip-next``,
``resume`` and ``remove``."""

from __future__ import annotations

import click

from cluster.cli.base import (
    PulseCommand,
    parse_time,
    tenant_option,
    with_store,
)
from cluster.jobs.models import Job, JobStatus, iso, shown
from cluster.store.jobstore.store import JobStore


def next_run(job: Job) -> str:
    if job.status == JobStatus.DONE:
        return "none (done: its one slot has run)"
    waits = "none while paused" if job.paused else "none until its upstream allows it"
    return iso(shown(job.next_run_at)) or waits


def _done(verb: str, job: Job) -> None:
    click.echo(f"{verb} {job.name} (tenant {job.tenant}): {job.status}, next run {next_run(job)}")


@click.command("pause", cls=PulseCommand)
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


@click.command("skip-next", cls=PulseCommand)
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


@click.command("resume", cls=PulseCommand)
@click.argument("name")
@tenant_option
@with_store
async def resume_job(store: JobStore, name: str, tenant: str) -> None:
    """Resume a paused job at its next future slot."""
    _done("resumed", await store.resume(name, tenant))


@click.command("remove", cls=PulseCommand)
@click.argument("name")
@tenant_option
@click.option(
    "--cascade", is_flag=True, help="Also remove the jobs that wait for it (--after, @after:)."
)
@with_store
async def remove_job(store: JobStore, name: str, tenant: str, cascade: bool) -> None:
    """Delete a job and its run history; refused while other jobs wait for it."""
    for removed in await store.remove(name, tenant, cascade=cascade):
        click.echo(f"removed {removed} (tenant {tenant})")
