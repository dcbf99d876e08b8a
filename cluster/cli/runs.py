"""``pulse runs``: the run history (list by default; ``show``, ``cancel`` and ``prune`` as
sub-commands)."""

from __future__ import annotations

import getpass
import json
import socket

import click

from cluster.cli.base import (
    PulseCommand,
    PulseGroup,
    configure,
    emit_json,
    fail,
    global_options,
    parse_time,
    run,
    settings_of,
    tenant_option,
    with_store,
)
from cluster.cli.table import table
from cluster.jobs.models import RUN_STATUSES, Run, RunStatus, iso
from cluster.store import JobStore


@click.group("runs", cls=PulseGroup, invoke_without_command=True, params=global_options())
@click.option("--job", default=None, help="Only this job.")
@click.option("--tenant", default=None, help="Only this tenant.")
@click.option("--status", type=click.Choice(RUN_STATUSES), default=None)
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
            "ORIGIN",
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
                r.origin,
                (r.last_error or "").splitlines()[0][:60] if r.last_error else "",
            ]
            for r in found
        ]
        table([header, *body])
        if not found:
            click.echo("no runs")

    run(go())


@runs.command("show")
@click.argument("name")
@tenant_option
@click.option("--slot", default=None, help="The run of this slot, ISO 8601 [default: the latest].")
@click.option("--json", "as_json", is_flag=True, help="Print the run as JSON.")
@click.pass_context
def show_run(ctx: click.Context, name: str, tenant: str, slot: str | None, as_json: bool) -> None:
    """Show one run of a job with what it produced: stdout, stderr, return value, log."""
    when = parse_time(slot, "slot")

    async def go() -> None:
        async with JobStore.open(settings_of(ctx)) as store:
            found = await store.run(name, tenant, slot=when)
        if as_json:
            emit_json({**found.to_json(), "output": found.output_json(), "metrics": found.metrics})
        else:
            _print_run(found)

    run(go())


@runs.command("cancel")
@click.argument("name")
@tenant_option
@click.option("--slot", default=None, help="Only the run of this slot, ISO 8601.")
@click.option("--all", "every", is_flag=True, help="Every running slot of the job.")
@click.option("--by", envvar="PULSE_CANCEL_BY", default=None, help="Who asks [default: user@host].")
@click.pass_context
def cancel_run(
    ctx: click.Context, name: str, tenant: str, slot: str | None, every: bool, by: str | None
) -> None:
    """Stop a running slot of a job; it is recorded cancelled and not retried."""
    when = parse_time(slot, "slot")
    if every and when is not None:
        fail("invalid --all: give either --slot or --all", 2)
    who = by or f"{getpass.getuser()}@{socket.gethostname()}"

    async def go() -> None:
        async with JobStore.open(settings_of(ctx)) as store:
            asked = await store.runcontrol.cancel(name, tenant, by=who, slot=when, every=every)
        for request in asked:
            if request.watched:
                click.echo(
                    f"cancelled {name} (tenant {tenant}) slot {iso(request.slot)}: a watched "
                    "run, recorded cancelled; Pulse does not stop its process"
                )
                continue
            click.echo(
                f"cancelling {name} (tenant {tenant}) slot {iso(request.slot)}, attempt "
                f"{request.attempt} on {request.node_id or '-'}"
            )

    run(go())


def _print_run(r: Run) -> None:
    duration = f"{r.duration_s:.3f}s" if r.duration_s is not None else "-"
    fields = [
        ["job", f"{r.job_name} (tenant {r.tenant})"],
        ["slot", iso(r.scheduled_for) or "-"],
        ["status", f"{r.status} (attempt {r.attempt})"],
        ["node", f"{r.node_id} (zone {r.zone})" if r.node_id else "-"],
        ["started", iso(r.started_at) or "-"],
        ["finished", iso(r.finished_at) or "-"],
        ["duration", duration],
    ]
    if r.last_error:
        fields.append(["error", r.last_error])
    output = r.output_json()
    if output["truncated"]:
        fields.append(["truncated", ", ".join(output["truncated"])])
    metrics = r.metrics
    if metrics:
        fields.append(["metrics", ", ".join(f"{k}={v:g}" for k, v in sorted(metrics.items()))])
    table(fields)
    shown = False
    for part in ("stdout", "stderr", "result", "log"):
        value = output[part]
        if value is None:
            continue
        shown = True
        click.echo(f"--- {part}")
        if part == "log":
            click.echo("\n".join(value))
        elif part == "result":
            click.echo(json.dumps(value, indent=2, ensure_ascii=False))
        else:
            click.echo(value.rstrip("\n"))
    if not shown:
        click.echo("no output" if r.status != RunStatus.RUNNING else "no output yet (running)")


@click.command("prune", cls=PulseCommand)
@click.option("--dry-run", is_flag=True, help="Count what would go; delete nothing.")
@click.option("--json", "as_json", is_flag=True, help='Print {"removed": N} as JSON.')
@with_store
async def prune_runs(store: JobStore, dry_run: bool, as_json: bool) -> None:
    """Delete the runs past their retention (`pulse config`, a job's --keep-for and
    --keep-runs) in every shard, in small batches, as the nodes do for their shards."""
    result = await store.prune(dry_run=dry_run)
    if as_json:
        emit_json({"would_remove": result.runs} if dry_run else {"removed": result.runs})
        return
    events = f" and {result.alert_events} alert events" if result.alert_events else ""
    if result.revisions:
        events += f" and {result.revisions} revisions of removed jobs"
    if result.chain_slots:
        events += f" and {result.chain_slots} chained jobs' slots run long ago"
    verb = "would remove" if dry_run else "removed"
    click.echo(f"{verb} {result.runs} runs{events}")


runs.add_command(prune_runs)
