"""A job's history: ``pulse jobs history`` (its revisions: who changed what, how, when) and
``pulse jobs rollback`` (a revision's definition written again as a new revision);
``cluster.store.jobstore.revisions`` owns the reads and the rollback."""

from __future__ import annotations

import json

import click

from cluster.cli.base import PulseCommand, emit_json, tenant_option, with_store
from cluster.cli.table import table
from cluster.errors import NotFound
from cluster.jobs.models import iso
from cluster.store.jobstore.revisions import Revision
from cluster.store.jobstore.store import JobStore

MAX_SHOWN = 60  # characters of a changed value in the text listing


def short_value(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 3] + "..."


def _changes(revision: Revision) -> str:
    if revision.change != "updated":
        return revision.change
    return "; ".join(
        f"{key}: {short_value(old)} -> {short_value(new)}"
        for key, (old, new) in revision.diff.items()
    )


@click.command("history", cls=PulseCommand)
@click.argument("name")
@tenant_option
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 10_000))
@click.option("--json", "as_json", is_flag=True)
@with_store
async def history(store: JobStore, name: str, tenant: str, limit: int, as_json: bool) -> None:
    """List a job's revisions, newest first: who changed which fields, how and when."""
    found = await store.revisions.history(name, tenant, limit=limit)
    if not found:
        raise NotFound(f"no job named {name!r} in tenant {tenant!r} has a history")
    if as_json:
        emit_json({"revisions": [r.to_json() for r in found]})
        return
    rows = [["REV", "AT", "WHO", "HOW", "CHANGES"]]
    rows += [[str(r.revision), iso(r.at) or "", r.who, r.how, _changes(r)] for r in found]
    table(rows)


@click.command("rollback", cls=PulseCommand)
@click.argument("name")
@tenant_option
@click.option("--to", "to", required=True, type=int, help="The revision to restore.")
@with_store
async def rollback(store: JobStore, name: str, tenant: str, to: int) -> None:
    """Write revision --to's definition again, as the job's newest revision (a removed job
    is created again). Exit 2 for a revision the job never had; nothing is written."""
    done = await store.revisions.rollback(name, tenant, to)
    if done.revision is None:
        click.echo(f"{name} (tenant {tenant}) already has revision {to}'s definition")
        return
    click.echo(
        f"rolled back {name} (tenant {tenant}) to revision {to}: now revision {done.revision}"
    )
