"""``pulse runs``: the run history (list by default; ``show``, ``cancel`` and ``prune`` as
sub-commands), and ``pulse audit``: the slot ledger over a time range, one line per slot a
job should have had (and per run on no slot), then counts per verdict per job; exit 1 when
a slot is missing or a final record was overwritten (docs/design/audit.md)."""

from __future__ import annotations

import csv
import getpass
import json
import socket
import sys
from contextlib import aclosing

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
    seconds,
    settings_of,
    tenant_option,
    with_store,
)
from cluster.cli.table import table
from cluster.jobs.ledger import VERDICTS, Line, Summary
from cluster.jobs.models import RUN_STATUSES, Run, RunStatus, iso
from cluster.store import JobStore
from cluster.store.observe.audit import Scope, audit_lines


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
            shown = {"output": found.output_json(), "metrics": found.metrics}
            emit_json({**found.to_json(), **shown, "coverage": found.coverage})
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
            if request.queued:  # an every-node member's run not started yet
                click.echo(
                    f"cancelled {name} (tenant {tenant}) slot {iso(request.slot)} on "
                    f"{request.node_id}: not started"
                )
                continue
            click.echo(
                f"cancelling {request.job or name} (tenant {tenant}) slot {iso(request.slot)}, "
                f"attempt {request.attempt} on {request.node_id or '-'}"
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
    coverage = r.coverage
    if coverage is not None:  # an every-node slot: each member's end
        ended = coverage.get("ended") or {}
        for member in coverage.get("members") or []:
            end = ended.get(member) or {}
            why = f" ({end['why']})" if end.get("why") else ""
            fields.append([f"node {member}", f"{end.get('status', 'running')}{why}"])
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


CSV_FIELDS = ("tenant", "job", "slot", "verdict", "outcome", "node", "attempts", "token",
              "origin", "detail")  # fmt: skip


@click.command("audit", cls=PulseCommand)
@click.option("--from", "start", required=True, help="Start of the range (ISO 8601, with offset).")
@click.option("--to", "end", required=True, help="End of the range, excluded.")
@click.option("--tenant", default=None, help="Only this tenant.")
@click.option("--job", default=None, help="Only jobs of this name.")
@click.option(
    "--grace",
    default="1m",
    show_default=True,
    help="A slot due this recently may still be unrecorded without being missing.",
)
@click.option("--json", "as_json", is_flag=True, help="JSON lines: each slot, then the summary.")
@click.option("--csv", "as_csv", is_flag=True, help="CSV: a header, then each slot.")
@with_store
async def audit(
    store: JobStore,
    start: str,
    end: str,
    tenant: str | None,
    job: str | None,
    grace: str,
    as_json: bool,
    as_csv: bool,
) -> None:
    """Check the slot ledger from --from to --to: every slot a job should have had ran or
    was recorded skipped, and no final record was overwritten. Exit 1 when a slot is
    missing or a record overwritten."""
    if as_json and as_csv:
        fail("invalid csv: --json and --csv exclude each other", 2)
    start_at, end_at = parse_time(start, "from"), parse_time(end, "to")
    assert start_at is not None and end_at is not None
    scope = Scope(
        start_at, end_at, tenant=tenant, job=job, grace_s=seconds(grace, "grace")
    ).checked()
    summary = Summary()
    writer = csv.writer(sys.stdout, lineterminator="\n") if as_csv else None
    if writer is not None:
        writer.writerow(CSV_FIELDS)
    async with aclosing(audit_lines(store.db.conn, scope)) as lines:
        async for line in lines:
            summary.add(line)
            if writer is not None:
                found = line.to_json()
                writer.writerow(["" if found[k] is None else found[k] for k in CSV_FIELDS])
            elif as_json:
                click.echo(json.dumps({"type": "slot", **line.to_json()}, ensure_ascii=False))
            else:
                click.echo(text_line(line))
    if as_json:
        click.echo(json.dumps({"type": "summary", **summary.to_json()}, ensure_ascii=False))
    elif not as_csv:
        print_summary(summary)
    if summary.failing:
        sys.exit(1)


def text_line(line: Line) -> str:
    what = {
        "ran": f"{line.outcome} on {line.node or '-'}, attempt {line.attempts}, "
        f"token {line.token if line.token is not None else '-'}",
    }.get(line.verdict, line.detail)
    if line.verdict == "ran" and line.detail:
        what = f"{what}: {line.detail.splitlines()[0][:120]}"
    if line.verdict == "reran":
        what = f"{line.outcome}, token {line.token}: {line.detail}"
    slot = line.slot.isoformat().replace("+00:00", "Z")
    return f"{slot}  {line.tenant}/{line.job}  {line.verdict:<11}  {what}".rstrip()


def print_summary(summary: Summary) -> None:
    if not summary.counts:
        click.echo("no jobs in range")
        return
    click.echo("")
    rows = [["TENANT", "JOB", *(v.upper() for v in VERDICTS)]]
    for (tenant, job), per in sorted(summary.counts.items()):
        rows.append([tenant, job, *(str(per[v]) for v in VERDICTS)])
    rows.append(["", "total", *(str(summary.total(v)) for v in VERDICTS)])
    table(rows)
