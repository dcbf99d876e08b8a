"""``pulse handlers ...``: the Python handlers registries offer to jobs written over the HTTP
API (``registered_handlers``, docs/python.md). Nodes and ``pulse jobs apply --module``
record them; an operator lists them and removes one a registry no longer offers."""

from __future__ import annotations

import click

from cluster.cli.base import PulseGroup, emit_json, with_store
from cluster.cli.table import table
from cluster.jobs.models import iso
from cluster.store.jobstore.store import JobStore


@click.group(cls=PulseGroup)
def handlers() -> None:
    """The Python handlers registries offer to the HTTP API."""


@handlers.command("list")
@click.option("--json", "as_json", is_flag=True)
@with_store
async def list_handlers(store: JobStore, as_json: bool) -> None:
    """List the offered handlers, by tenant."""
    found = await store.handlers.all()
    if as_json:
        emit_json([r.to_json() for r in found])
        return
    if not found:
        click.echo("no handlers offered")
        return
    rows = [[r.tenant, r.handler, r.registered_by, iso(r.registered_at) or ""] for r in found]
    table([["TENANT", "HANDLER", "BY", "REGISTERED"], *rows])


@handlers.command("remove")
@click.argument("handler")
@click.option("--tenant", default=None, help="Only this tenant's offer [default: every tenant].")
@with_store
async def remove_handler(store: JobStore, handler: str, tenant: str | None) -> None:
    """Stop offering HANDLER to jobs written over the API (jobs that use it stay; a node
    that loads a registry offering it records it again at its next start)."""
    removed = await store.handlers.remove(handler, tenant)
    click.echo(f"removed {removed} offer{'s' if removed != 1 else ''} of {handler}")
