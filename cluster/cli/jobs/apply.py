"""``pulse jobs apply`` and ``pulse jobs export``: jobs from a file or from the registries of
Python modules, all or nothing, or a plan of what applying them would change."""

from __future__ import annotations

import gc
import os

import click

from cluster.cli.audited import os_user
from cluster.cli.base import (
    PulseCommand,
    emit_json,
    fail,
    with_store,
)
from cluster.cli.jobs import plans
from cluster.errors import InvalidInput
from cluster.jobs import handlerrefs
from cluster.jobs.files import load_specs
from cluster.jobs.registry import export_yaml, handlers_of, load_modules, specs_of
from cluster.jobs.spec import JobSpec
from cluster.store.jobstore.store import JobStore

module_option = click.option(
    "--module",
    "modules",
    multiple=True,
    envvar="PULSE_JOB_MODULES",
    help="Use the pulsecron Registry objects of this module (repeatable) [env PULSE_JOB_MODULES].",
)


def _specs(
    file: str | None, modules: tuple[str, ...]
) -> tuple[list[JobSpec], list[tuple[str, str]]]:
    """The jobs of FILE or of the registries of ``--module``s (exactly one of the two), and
    the (tenant, handler) pairs the registries offer to the HTTP API."""
    if file is not None and modules:
        raise InvalidInput("jobs", "give a FILE or --module, not both")
    if file is None and not modules:
        raise InvalidInput("jobs", "give a FILE or --module MODULE")
    if file is not None:
        # Many small objects, none in a cycle: the cycle collector would walk them again at
        # each full pass while they are read, then during the whole apply. Read without it,
        # then set them aside from it (the process ends with the apply).
        gc.disable()
        try:
            specs = load_specs(file)
        finally:
            gc.enable()
        gc.freeze()
        return specs, []
    registries = load_modules(modules)
    return specs_of(registries), handlers_of(registries)


@click.command("apply", cls=PulseCommand)
@click.argument("file", type=click.Path(dir_okay=False), required=False)
@module_option
@click.option("--prune", is_flag=True, help="Remove jobs that are not in FILE or the modules.")
@click.option("--plan", "plan_only", is_flag=True, help="Print what would change; write nothing.")
@click.option(
    "--plan-file",
    default=None,
    type=click.Path(dir_okay=False),
    help="Apply only if no job changed since this `--plan --json` output was made.",
)
@click.option(
    "--expect-revision",
    "expect",
    multiple=True,
    help="[TENANT/]NAME=REV: apply only if the job is at this revision (0: absent).",
)
@click.option("--json", "as_json", is_flag=True)
@with_store
async def apply_jobs(
    store: JobStore,
    file: str | None,
    modules: tuple[str, ...],
    prune: bool,
    plan_only: bool,
    plan_file: str | None,
    expect: tuple[str, ...],
    as_json: bool,
) -> None:
    """Create or update the jobs of a YAML or JSON file, or of the registries of Python
    modules (idempotent, all or nothing), or with --plan say what that would change."""
    specs, handlers = _specs(file, modules)
    for position, entry in enumerate(specs, 1):
        try:
            handlerrefs.require_broker(entry.handler, os.environ)
        except InvalidInput as exc:
            raise InvalidInput("file", f"entry {position} ({entry.name}): {exc}") from exc
    await store.revisions.act_as(os_user(), "module" if modules else "file")
    if plan_only:
        plans.print_plan(await store.plans.plan(specs, prune=prune), as_json)
        return
    expected = plans.expectations(specs, prune, plan_file, expect)
    async with store.transaction():
        result = await store.definitions.apply(specs, prune=prune, expect=expected)
        await store.handlers.register(handlers, "pulse jobs apply")
    if as_json:
        emit_json(
            {
                "created": result.created,
                "updated": result.updated,
                "unchanged": result.unchanged,
                "removed": result.removed,
            }
        )
        return
    if not result.changed:
        click.echo(f"no changes ({len(result.unchanged)} jobs unchanged)")
        return
    for verb, names in (
        ("created", result.created),
        ("updated", result.updated),
        ("removed", result.removed),
    ):
        for label in names:
            click.echo(f"{verb} {label}")
    click.echo(
        f"{len(result.created)} created, {len(result.updated)} updated, "
        f"{len(result.removed)} removed, {len(result.unchanged)} unchanged"
    )


@click.command("export", cls=PulseCommand)
@module_option
def export_jobs(modules: tuple[str, ...]) -> None:
    """Print the jobs of the registries of Python modules as a job file."""
    if not modules:
        fail("invalid module: give at least one --module MODULE", 2)
    try:
        registries = load_modules(modules)
        specs_of(registries)
    except InvalidInput as exc:
        fail(f"invalid {exc}", 2)
    click.echo(export_yaml(registries), nl=False)
