"""``pulse tenants ...``: limits of concurrent runs per tenant, enforced across the cluster
by the claim (docs/jobs.md, docs/design/fairness.md)."""

from __future__ import annotations

import click

from cluster.cli.base import PulseGroup, emit_json, with_store
from cluster.cli.jobs import table
from cluster.jobs.models import iso
from cluster.store.jobs import JobStore


@click.group(cls=PulseGroup)
def tenants() -> None:
    """Limit how many runs of a tenant run at once."""


@tenants.command("set")
@click.argument("tenant")
@click.option(
    "--max-concurrent", type=int, required=True, help="Runs of the tenant at once, cluster-wide."
)
@with_store
async def set_limit(store: JobStore, tenant: str, max_concurrent: int) -> None:
    """Run at most --max-concurrent of TENANT's slots at once across the cluster."""
    limit = await store.tenants.set_limit(tenant, max_concurrent)
    click.echo(
        f"tenant {limit.tenant}: at most {limit.max_concurrent} at once ({limit.running} running)"
    )


@tenants.command("clear")
@click.argument("tenant")
@with_store
async def clear_limit(store: JobStore, tenant: str) -> None:
    """Lift TENANT's limit."""
    await store.tenants.clear_limit(tenant)
    click.echo(f"tenant {tenant}: no limit")


@tenants.command("list")
@click.option("--json", "as_json", is_flag=True)
@with_store
async def list_limits(store: JobStore, as_json: bool) -> None:
    """List the tenants' limits with the runs in flight of each."""
    found = await store.tenants.limits()
    if as_json:
        emit_json([x.to_json() for x in found])
        return
    if not found:
        click.echo("no tenant limits")
        return
    rows = [
        [x.tenant, str(x.max_concurrent), str(x.running), iso(x.updated_at) or ""] for x in found
    ]
    table([["TENANT", "MAX CONCURRENT", "RUNNING", "UPDATED"], *rows])
