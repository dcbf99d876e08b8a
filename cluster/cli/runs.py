"""``pulse runs``: the run history (list by default; ``show`` and ``prune`` as sub-commands)."""

from __future__ import annotations

import click

from cluster.cli.base import PulseGroup, configure, emit_json, global_options, run, settings_of
from cluster.cli.jobs import table
from cluster.store import JobStore

STATUSES = ["running", "succeeded", "failed", "timed_out", "skipped", "lost"]


@click.group("runs", cls=PulseGroup, invoke_without_command=True, params=global_options())
@click.option("--job", default=None, help="Only this job.")
@click.option("--tenant", default=None, help="Only this tenant.")
@click.option("--status", type=click.Choice(STATUSES), default=None)
@click.option("--limit", type=click.IntRange(1, 100_000), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def runs(
    ctx: click.Context,
    job: str | None,
    tenant: str | None,
    status: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """Show recent runs, newest slot first."""
    if ctx.invoked_subcommand is not None:
        return
    configure(ctx)

    async def go() -> None:
        async with JobStore.open(settings_of(ctx)) as store:
            found = await store.runs(job, tenant, status, limit)
        if as_json:
            emit_json([r.to_json() for r in found])
            return
        header = [
            "SCHEDULED FOR",
            "TENANT",
            "JOB",
            "STATUS",
            "ATTEMPT",
            "NODE",
            "DURATION",
            "ERROR",
        ]
        body = [
            [
                r.scheduled_for.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3],
                r.tenant,
                r.job_name,
                r.status,
                str(r.attempt),
                r.node_id or "-",
                f"{r.duration_s:.3f}s" if r.duration_s is not None else "-",
                (r.last_error or "").splitlines()[0][:60] if r.last_error else "",
            ]
            for r in found
        ]
        table([header, *body])
        if not found:
            click.echo("no runs")

    run(go())
