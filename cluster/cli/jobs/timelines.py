"""How ``pulse jobs show --explain/--outage`` and ``pulse schedule --explain`` print a
timeline (``cluster.timing.timeline``)."""

from __future__ import annotations

import click

from cluster.cli.base import emit_json
from cluster.jobs.models import iso
from cluster.timing.timeline import Step

__all__ = ["print_steps"]


def print_steps(steps: list[Step], as_json: bool, *, empty: bool = True) -> None:
    """A timeline, one slot a line and its notes indented below (or as JSON); ``empty``:
    say so when there is no slot."""
    if as_json:
        emit_json([step.to_json() for step in steps])
        return
    for step in steps:
        start = (
            "" if step.start is None or step.start == step.slot else f" starts {iso(step.start)}"
        )
        click.echo(f"{iso(step.slot)}  {step.action}{start}")
        for note in step.notes:
            click.echo(f"    {note}")
    if not steps and empty:
        click.echo("no slots")
