"""``pulse jobs apply --plan``: a plan printed for a person or as JSON for CI, and the
revisions an apply must find (``--expect-revision``, ``--plan-file``) for a plan that went
stale to be refused; ``cluster.store.jobstore.plans`` makes the plan."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import click

from cluster.cli.base import emit_json
from cluster.cli.jobs.history import short_value
from cluster.errors import Conflict, InvalidInput
from cluster.jobs.fields import DEFAULT_TENANT
from cluster.jobs.models import iso
from cluster.jobs.spec import OPTIONS, JobSpec
from cluster.store.jobstore.plans import Plan, digest_of
from cluster.timing.timeline import Step


def print_plan(plan: Plan, as_json: bool) -> None:
    if as_json:
        emit_json(plan.to_json())
        return
    for job in plan.jobs:
        click.echo(f"{job.action} {job.label} (revision {job.revision})")
        if job.action == "unchanged":
            continue
        for name, (old, new) in job.changes.items():  # as a job file writes them
            key, before = OPTIONS.as_written(name, old)
            after = OPTIONS.as_written(name, new)[1]
            if job.action == "create":
                click.echo(f"  {key}: {short_value(after)}")
            else:
                click.echo(f"  {key}: {short_value(before)} -> {short_value(after)}")
        for verb, edges in (("adds", job.edges_added), ("drops", job.edges_removed)):
            click.echo("".join(f"  {verb} edge {edge}\n" for edge in edges), nl=False)
        for title, steps in (("next before", job.next_before), ("next after", job.next_after)):
            if job.action != "remove":
                click.echo(f"  {title}:" + ("" if steps else " none"))
                _steps(steps)
        if job.catch_up:
            click.echo("  catch-up once applied:")
            _steps(job.catch_up)
        for note in job.notes:
            click.echo(f"  note: {note}")
    changed = sum(j.action != "unchanged" for j in plan.jobs)
    click.echo(f"plan at {iso(plan.at)}: {changed} to change, nothing written")


def _steps(steps: Sequence[Step]) -> None:
    for step in steps:
        start = (
            "" if step.start is None or step.start == step.slot else f" starts {iso(step.start)}"
        )
        notes = f"  ({'; '.join(step.notes)})" if step.notes else ""
        click.echo(f"    {iso(step.slot)} {step.action}{start}{notes}")


def expectations(
    specs: Sequence[JobSpec], prune: bool, plan_file: str | None, expect: Sequence[str]
) -> dict[tuple[str, str], int] | None:
    """The revision each job must be at: from a plan file (whose definitions must be
    these) and ``[TENANT/]NAME=REV`` flags; None if neither was given."""
    if plan_file is None and not expect:
        return None
    found: dict[tuple[str, str], int] = {}
    if plan_file is not None:
        try:
            data = json.loads(Path(plan_file).read_text(encoding="utf-8"))
            jobs = data["jobs"]
            digest = data["digest"]
            found = {(str(j["tenant"]), str(j["name"])): int(j["revision"]) for j in jobs}
        except OSError as exc:
            raise InvalidInput("plan-file", f"cannot read {plan_file}: {exc.strerror}") from exc
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidInput(
                "plan-file", f"{plan_file} is not the output of `pulse jobs apply --plan --json`"
            ) from exc
        if digest != digest_of(specs, prune):
            raise Conflict(
                "plan", "stale: the definitions changed since the plan was made; plan again"
            )
    for item in expect:
        label, sep, rev = item.rpartition("=")
        tenant, _, name = label.rpartition("/")
        if not sep or not name or not rev.isdigit():
            raise InvalidInput("expect-revision", f"give [TENANT/]NAME=REV, got {item!r}")
        found[(tenant or DEFAULT_TENANT, name)] = int(rev)
    return found
