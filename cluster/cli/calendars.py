"""``pulse calendars ...``: business calendars jobs plan their slots with (docs/time.md).

``add`` creates a calendar or replaces one, re-planning the next slot of every job that
uses it in the same transaction."""

from __future__ import annotations

from pathlib import Path

import click

from cluster.cli.base import PulseGroup, emit_json, with_store
from cluster.cli.table import table
from cluster.errors import InvalidInput
from cluster.jobs.models import iso
from cluster.store.jobstore.store import JobStore
from cluster.timing.calendars import Calendar, format_weekdays, parse_dates, parse_weekdays
from cluster.timing.icsdates import ics_dates

MAX_ICS_BYTES = 4 * 1024 * 1024


@click.group(cls=PulseGroup)
def calendars() -> None:
    """Business calendars: weekdays and holidays jobs plan their slots with."""


@calendars.command("add")
@click.argument("name")
@click.option("--ics", "ics_file", default=None, help="Exclude the dates of this iCalendar file.")
@click.option(
    "--dates",
    "dates",
    multiple=True,
    help="Exclude these dates (2026-12-25,2026-12-26; repeatable).",
)
@click.option("--weekdays", default="mon-fri", show_default=True, help="Business weekdays.")
@click.option("--json", "as_json", is_flag=True)
@with_store
async def add_calendar(
    store: JobStore,
    name: str,
    ics_file: str | None,
    dates: tuple[str, ...],
    weekdays: str,
    as_json: bool,
) -> None:
    """Create the calendar NAME, or replace it and re-plan the jobs that use it."""
    excluded = set(parse_dates(dates))
    sources = [f"weekdays {weekdays}"]
    if ics_file is not None:
        excluded |= ics_dates(_read_ics(ics_file))
        sources.append(f"ics {Path(ics_file).name}")
    if dates:
        sources.append(f"{len(parse_dates(dates))} dates")
    calendar = Calendar(name, parse_weekdays(weekdays), frozenset(excluded))
    result = await store.calendars.put(calendar, source="; ".join(sources))
    if as_json:
        emit_json({**result.calendar.to_json(), "replanned": list(result.replanned)})
        return
    verb = "created" if result.created else "updated"
    info = result.calendar
    click.echo(
        f"{verb} calendar {info.name}: {format_weekdays(info.weekdays)}, "
        f"{info.excluded_count} excluded dates; re-planned {len(result.replanned)} jobs"
    )


@calendars.command("list")
@click.option("--json", "as_json", is_flag=True)
@with_store
async def list_calendars(store: JobStore, as_json: bool) -> None:
    """List the calendars with how many jobs use each."""
    found = await store.calendars.list()
    if as_json:
        emit_json([c.to_json() for c in found])
        return
    if not found:
        click.echo("no calendars")
        return
    rows = [
        [c.name, format_weekdays(c.weekdays), str(c.excluded_count), str(c.jobs), str(c.version),
         iso(c.updated_at) or ""]
        for c in found
    ]  # fmt: skip
    table([["NAME", "WEEKDAYS", "EXCLUDED", "JOBS", "VERSION", "UPDATED"], *rows])


@calendars.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
@with_store
async def show_calendar(store: JobStore, name: str, as_json: bool) -> None:
    """Show a calendar and every date it excludes."""
    info = await store.calendars.get(name)
    if as_json:
        emit_json(info.to_json())
        return
    click.echo(f"calendar {info.name} (version {info.version}, used by {info.jobs} jobs)")
    click.echo(f"  business weekdays: {format_weekdays(info.weekdays)}")
    click.echo(f"  source: {info.source or '-'}")
    click.echo(f"  excluded dates: {info.excluded_count}")
    for day in info.excluded or ():
        click.echo(f"    {day.isoformat()} {day.strftime('%a')}")


@calendars.command("remove")
@click.argument("name")
@with_store
async def remove_calendar(store: JobStore, name: str) -> None:
    """Remove a calendar no job uses."""
    await store.calendars.remove(name)
    click.echo(f"removed calendar {name}")


def _read_ics(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_ICS_BYTES + 1)
    except OSError as exc:
        raise InvalidInput("ics", f"cannot read {path!r} ({exc.strerror})") from exc
    if len(data) > MAX_ICS_BYTES:
        raise InvalidInput("ics", f"{path!r} is larger than 4 MiB")
    return data
