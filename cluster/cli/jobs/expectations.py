"""The options of ``pulse jobs add`` that set a job's expectations of its runs
(``cluster.jobs.expectations``; docs/jobs.md), declared once."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import click

F = TypeVar("F", bound=Callable[..., object])

_OPTIONS = (
    click.option("--expect-max", default=None, help="Alert `slow` when a run goes on this long."),
    click.option("--expect-min", default=None, help="Alert `too_fast` when a run ends sooner."),
    click.option(
        "--deadline", default=None, help="Alert `overdue` when a run goes on past HH:MM (--tz)."
    ),
    click.option(
        "--expect-baseline",
        default=None,
        help="Alert `slow` past this factor (3x) of the p95 of its kept runs.",
    ),
    click.option(
        "--assert",
        "asserts",
        default=None,
        help="Checks of the run's metrics ('rows > 0 and errors == 0'): `assertion_failed`.",
    ),
    click.option("--assert-fails", is_flag=True, help="A failed --assert fails the run instead."),
)


def expectation_options(command: F) -> F:
    for option in reversed(_OPTIONS):
        command = option(command)
    return command
