"""``pulse schedule``: print the next slots of an expression, without a database."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import click

from cluster.cli.base import PulseCommand, emit_json, fail, parse_time
from cluster.errors import InvalidInput
from cluster.models import iso
from cluster.schedule import parse_schedule


@click.command("schedule", cls=PulseCommand)
@click.argument("expr")
@click.option("--tz", default="UTC", show_default=True, help="IANA time zone.")
@click.option("--count", type=click.IntRange(1, 10_000), default=5, show_default=True)
@click.option("--after", default=None, help="ISO 8601 time with offset [default: now].")
@click.option("--dst-repeated", default="once", show_default=True, help="once | twice")
@click.option("--dst-skipped", default="shift", show_default=True, help="shift | skip")
@click.option("--json", "as_json", is_flag=True)
def schedule_command(
    expr: str,
    tz: str,
    count: int,
    after: str | None,
    dst_repeated: str,
    dst_skipped: str,
    as_json: bool,
) -> None:
    """Print the next COUNT slots of EXPR, one aware ISO 8601 time a line."""
    start = parse_time(after, "after") or datetime.now(UTC)
    try:
        schedule = parse_schedule(expr, tz, dst_repeated, dst_skipped)  # type: ignore[arg-type]
    except InvalidInput as exc:
        fail(f"invalid {exc}", 2)
    slots = [iso(s.astimezone(ZoneInfo(schedule.tz))) for s in schedule.next_n(start, count)]
    if as_json:
        emit_json(slots)
    else:
        for slot in slots:
            click.echo(slot)
