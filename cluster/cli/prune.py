"""``pulse runs prune``: delete the runs past their retention in every shard, now."""

from __future__ import annotations

import click

from cluster.cli.base import PulseCommand, emit_json, with_store
from cluster.store.jobs import JobStore


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
    verb = "would remove" if dry_run else "removed"
    click.echo(f"{verb} {result.runs} runs{events}")
