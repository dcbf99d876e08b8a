"""``pulse jobs backfill`` and ``pulse backfills ...``: ask for a range of a job's slots to
run again, follow the requests, cancel them (docs/time.md)."""

from __future__ import annotations

import click

from cluster.cli.base import PulseCommand, PulseGroup, emit_json, parse_time, with_store
from cluster.cli.table import table
from cluster.jobs import fields
from cluster.jobs.models import iso
from cluster.store.housekeeping.backfills import Backfill
from cluster.store.jobstore.store import JobStore


@click.command("backfill", cls=PulseCommand)
@click.argument("name")
@click.option(
    "--tenant", default=fields.DEFAULT_TENANT, show_default=True, help="The job's tenant."
)
@click.option("--from", "start", required=True, help="First instant, ISO 8601 with offset.")
@click.option("--to", "end", required=True, help="End instant (excluded), ISO 8601 with offset.")
@click.option("--only-missing", is_flag=True, help="Leave out slots whose run succeeded.")
@click.option("--max-parallel", type=int, default=1, show_default=True, help="Slots at once.")
@click.option("--dry-run", is_flag=True, help="Print the slots it would run; change nothing.")
@click.option("--json", "as_json", is_flag=True)
@with_store
async def backfill_job(
    store: JobStore,
    name: str,
    tenant: str,
    start: str,
    end: str,
    only_missing: bool,
    max_parallel: int,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Run the slots of NAME's schedule in [--from, --to) again, oldest first."""
    first, last = parse_time(start, "from"), parse_time(end, "to")
    assert first is not None and last is not None
    plan = await store.runcontrol.backfill(
        name,
        tenant,
        start=first,
        end=last,
        only_missing=only_missing,
        max_parallel=max_parallel,
        dry_run=dry_run,
    )
    if plan.backfill is None:  # a dry run
        slots = [iso(s) for s in plan.slots]
        if as_json:
            emit_json({"slots": slots})
        else:
            for slot in slots:
                click.echo(slot)
        return
    if as_json:
        emit_json(plan.backfill.to_json())
        return
    b = plan.backfill
    cut = "" if plan.cut_at is None else " (the job's slot: it runs the later ones itself)"
    click.echo(
        f"backfill {b.id} of {b.job} (tenant {b.tenant}): {b.slots_total} slots from "
        f"{iso(b.range_from)} to {iso(b.range_to)}{cut}, {b.max_parallel} at a time"
    )


@click.group(cls=PulseGroup)
def backfills() -> None:
    """Follow and cancel backfill requests."""


def _row(b: Backfill) -> list[str]:
    return [
        str(b.id),
        f"{b.tenant}/{b.job}",
        f"{iso(b.range_from)} .. {iso(b.range_to)}",
        f"{b.slots_queued}/{b.slots_total}",
        str(b.in_flight),
        b.status,
    ]


@backfills.command("list")
@click.option("--tenant", default=None, help="Only this tenant.")
@click.option("--json", "as_json", is_flag=True)
@with_store
async def list_backfills(store: JobStore, tenant: str | None, as_json: bool) -> None:
    """List backfill requests with their progress (slots queued of the total)."""
    found = await store.runcontrol.backfills(tenant)
    if as_json:
        emit_json([b.to_json() for b in found])
        return
    if not found:
        click.echo("no backfills")
        return
    table([["ID", "JOB", "RANGE", "QUEUED", "IN FLIGHT", "STATUS"], *map(_row, found)])


@backfills.command("cancel")
@click.argument("backfill_id", metavar="ID", type=int)
@with_store
async def cancel_backfill(store: JobStore, backfill_id: int) -> None:
    """Stop a backfill: no more slots start; slots running now finish."""
    b = await store.runcontrol.cancel_backfill(backfill_id)
    click.echo(f"backfill {b.id} of {b.job} (tenant {b.tenant}): {b.status}")
