"""``pulse schedule``: print the next slots of an expression, without a database (with
``--calendar``, the calendar is read from the cluster's)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import click

from cluster.cli.base import PulseCommand, emit_json, fail, parse_time, run, settings_of
from cluster.cli.jobs.timelines import print_steps
from cluster.errors import InvalidInput
from cluster.jobs.fields import DEFAULT_TENANT
from cluster.jobs.models import iso
from cluster.store.jobstore.store import JobStore
from cluster.timing import timeline
from cluster.timing.calendared import CalendarRule, parse_on_excluded
from cluster.timing.calendars import Calendar
from cluster.timing.durations import parse_duration
from cluster.timing.instants import checked_instant
from cluster.timing.jitter import check_jitter, jittered
from cluster.timing.schedule import parse_schedule


@click.command("schedule", cls=PulseCommand)
@click.argument("expr")
@click.option("--tz", default="UTC", show_default=True, help="IANA time zone.")
@click.option("--count", type=click.IntRange(1, 10_000), default=5, show_default=True)
@click.option("--after", default=None, help="ISO 8601 time with offset [default: now].")
@click.option("--dst-repeated", default="once", show_default=True, help="once | twice")
@click.option("--dst-skipped", default="shift", show_default=True, help="shift | skip")
@click.option("--jitter", default="0s", show_default=True, help="A job's start jitter.")
@click.option("--job-id", default=None, help="The job's name, whose slots --jitter offsets.")
@click.option("--tenant", default=DEFAULT_TENANT, show_default=True, help="The job's tenant.")
@click.option("--explain", is_flag=True, help="Each slot with its DST rule and jitter.")
@click.option("--calendar", default=None, help="With --explain: the cluster's calendar NAME.")
@click.option(
    "--on-excluded", default="skip", show_default=True,
    help="With --calendar: skip | next-business-day | previous-business-day.",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def schedule_command(
    ctx: click.Context,
    expr: str,
    tz: str,
    count: int,
    after: str | None,
    dst_repeated: str,
    dst_skipped: str,
    jitter: str,
    job_id: str | None,
    tenant: str,
    explain: bool,
    calendar: str | None,
    on_excluded: str,
    as_json: bool,
) -> None:
    """Print the next COUNT slots of EXPR, one aware ISO 8601 time a line; with --jitter
    and --job-id, each slot followed by the instant that job's slot starts."""
    try:
        start = checked_instant(parse_time(after, "after"), "after") or datetime.now(UTC)
        schedule = parse_schedule(expr, tz, dst_repeated, dst_skipped)  # type: ignore[arg-type]
        jitter_s = check_jitter(schedule, parse_duration(jitter, "jitter"))
        excluded = parse_on_excluded(on_excluded)
    except InvalidInput as exc:
        fail(f"invalid {exc}", 2)
    if jitter_s and job_id is None:
        fail("invalid jitter: give --job-id too (each job's slots start at their own offsets)", 2)
    if calendar is not None and not explain:
        fail("invalid calendar: goes with --explain", 2)
    if explain:  # a job's windows too: `pulse jobs show NAME --explain`
        rule = None
        if calendar is not None:
            rule = CalendarRule(run(_calendar(ctx, calendar)), excluded)
        steps = timeline.explain(
            schedule, rule, start, count, tenant=tenant, name=job_id or "", jitter_s=jitter_s
        )
        print_steps(steps, as_json)
        return
    zone = ZoneInfo(schedule.tz)
    slots = schedule.next_n(start, count)
    if not jitter_s or job_id is None:
        shown: list[Any] = [iso(s.astimezone(zone)) for s in slots]
        lines = [str(s) for s in shown]
    else:
        starts = [jittered(tenant, job_id, s, jitter_s).astimezone(zone) for s in slots]
        shown = [
            {"slot": iso(s.astimezone(zone)), "start": iso(t)}
            for s, t in zip(slots, starts, strict=True)
        ]
        lines = [f"{item['slot']}  starts {item['start']}" for item in shown]
    if as_json:
        emit_json(shown)
    else:
        for line in lines:
            click.echo(line)


async def _calendar(ctx: click.Context, name: str) -> Calendar:
    """The cluster's calendar ``name``; ``InvalidInput`` for one it does not have."""
    async with JobStore.open(settings_of(ctx)) as store:
        try:
            info = await store.calendars.get(name)
        except LookupError as exc:
            raise InvalidInput(
                "calendar", f"unknown calendar {name!r} (pulse calendars list)"
            ) from exc
    return Calendar(info.name, info.weekdays, frozenset(info.excluded or ()))
