"""``pulse audit``: the slot ledger over a time range, one line per slot a job should have
had (and per run on no slot), then counts per verdict per job; exit 1 when a slot is
missing or a final record was overwritten (docs/guarantees.md, docs/design/audit.md)."""

from __future__ import annotations

import csv
import json
import sys
from contextlib import aclosing

import click

from cluster.cli.base import PulseCommand, fail, parse_time, seconds, with_store
from cluster.cli.table import table
from cluster.store import JobStore
from cluster.store.observe.audit import Scope, audit_lines
from cluster.timing.ledger import VERDICTS, Line, Summary

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
