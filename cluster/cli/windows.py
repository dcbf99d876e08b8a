"""``pulse windows ...``: blackout windows, when slots of a job, a tenant or the cluster are
skipped or deferred to the window's end (docs/time.md)."""

from __future__ import annotations

import click

from cluster.cli.base import PulseGroup, emit_json, parse_time, with_store
from cluster.cli.table import table
from cluster.errors import InvalidInput
from cluster.jobs.labels import parse_label
from cluster.jobs.models import iso
from cluster.store.jobstore.store import JobStore


@click.group(cls=PulseGroup)
def windows() -> None:
    """Blackout windows: no slot starts inside (skipped, or deferred to the end)."""


@windows.command("add")
@click.option("--from", "start", required=True, help="Start, ISO 8601 with offset.")
@click.option("--to", "end", required=True, help="End (exclusive), ISO 8601 with offset.")
@click.option("--job", default=None, help="Only this job (of --tenant, default 'default').")
@click.option("--tenant", default=None, help="Only this tenant's jobs.")
@click.option("--label", default=None, help="Only jobs with this key=value (of --tenant, or all).")
@click.option("--whole-cluster", "whole", is_flag=True, help="Every job of the cluster.")
@click.option("--defer", is_flag=True, help="Run the slots at the end (catch-up decides).")
@click.option("--note", default=None, help="Why (shown by list).")
@click.option("--json", "as_json", is_flag=True)
@with_store
async def add_window(
    store: JobStore,
    start: str,
    end: str,
    job: str | None,
    tenant: str | None,
    label: str | None,
    whole: bool,
    defer: bool,
    note: str | None,
    as_json: bool,
) -> None:
    """Add a blackout window; the jobs it covers are re-planned at once."""
    if whole == (job is not None or tenant is not None or label is not None):
        raise InvalidInput(
            "scope",
            "give --job (and --tenant), --label (and --tenant), --tenant, or --whole-cluster",
        )
    if job is not None and label is not None:
        raise InvalidInput("label", "give --job or --label, not both")
    pair = None if label is None else parse_label(label)
    starts_at, ends_at = parse_time(start, "from"), parse_time(end, "to")
    assert starts_at is not None and ends_at is not None
    change = await store.windows.add(
        starts_at, ends_at, job=job, tenant=tenant, label=pair, defer=defer, note=note
    )
    if as_json:
        emit_json({**change.window.to_json(), "replanned": list(change.replanned)})
        return
    window = change.window
    click.echo(
        f"added window {window.id} for {window.target()}: {iso(window.starts_at)} to "
        f"{iso(window.ends_at)} ({'deferred' if window.defer else 'skipped'}); "
        f"re-planned {len(change.replanned)} jobs"
    )


@windows.command("list")
@click.option("--json", "as_json", is_flag=True)
@with_store
async def list_windows(store: JobStore, as_json: bool) -> None:
    """List the blackout windows, past ones too."""
    found = await store.windows.list()
    if as_json:
        emit_json([w.to_json() for w in found])
        return
    if not found:
        click.echo("no windows")
        return
    rows = [
        [str(w.id), iso(w.starts_at) or "", iso(w.ends_at) or "", w.target(),
         "defer" if w.defer else "skip", w.note or ""]
        for w in found
    ]  # fmt: skip
    table([["ID", "FROM", "TO", "FOR", "SLOTS", "NOTE"], *rows])


@windows.command("remove")
@click.argument("window_id", type=int)
@with_store
async def remove_window(store: JobStore, window_id: int) -> None:
    """Remove a blackout window; its jobs are re-planned without it."""
    change = await store.windows.remove(window_id)
    click.echo(f"removed window {window_id}; re-planned {len(change.replanned)} jobs")
