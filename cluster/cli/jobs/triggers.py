"""``pulse jobs trigger``: run a job now, with a payload of its own, or run a past slot again."""

from __future__ import annotations

import click

from cluster.cli.base import PulseCommand, emit_json, parse_time, tenant_option, with_store
from cluster.jobs.models import JobStatus, iso
from cluster.store.jobstore.store import JobStore


@click.command("trigger", cls=PulseCommand)
@click.argument("name")
@tenant_option
@click.option("--payload", default=None, help="Run with this JSON object instead of the job's.")
@click.option(
    "--merge-payload",
    default=None,
    help="Run with the job's payload and this JSON object merged in (RFC 7386: null removes).",
)
@click.option("--slot", default=None, help="Run this past slot again (ISO 8601 with offset).")
@click.option("--json", "as_json", is_flag=True, help="Print what was queued as JSON.")
@with_store
async def trigger_job(
    store: JobStore,
    name: str,
    tenant: str,
    payload: str | None,
    merge_payload: str | None,
    slot: str | None,
    as_json: bool,
) -> None:
    """Run a job now, keeping its regular schedule; with --payload or --merge-payload the run
    gets that input, with --slot a past slot runs again (origin rerun)."""
    inputs = (payload, merge_payload, slot) != (None, None, None)
    if not inputs and not await store.has_upstreams(name, tenant):
        job = await store.trigger(name, tenant)
        if as_json:
            emit_json(job.to_json())
            return
        if job.status == JobStatus.DONE:
            next_run = "none (done: its one slot has run)"
        else:
            next_run = iso(job.next_run_at) or "none while paused"
        click.echo(f"triggered {job.name} (tenant {job.tenant}): {job.status}, next run {next_run}")
        return
    moment = parse_time(slot, "slot")
    queued = await store.inputs.trigger(
        name, tenant, payload=payload, merge_payload=merge_payload, slot=moment
    )
    if as_json:
        emit_json(queued.to_json())
        return
    what = "rerun of slot" if queued.origin == "rerun" else "triggered slot"
    given = "its own payload" if queued.payload is None else "the given payload"
    # An extra run of a job with upstreams waits for none (docs/jobs.md#dependencies-between-jobs).
    extra = "" if inputs else ", waiting for no upstream"
    click.echo(
        f"queued {what} {iso(queued.slot)} of {queued.job} (tenant {queued.tenant}) with "
        f"{given}{extra}"
    )
