"""A job's time-rule fields as users give them: its calendar's name, what the calendar's
excluded slots do (``on_excluded``) and the business-day index (``business_day``),
checked together (``JobSpec.build``; the calendar itself is looked up when the job is
written, cluster/store/jobstore/calendar_rule.py)."""

from __future__ import annotations

from cluster.errors import InvalidInput
from cluster.timing.calendared import parse_on_excluded
from cluster.timing.schedule import Schedule

__all__ = ["DEFAULT_ON_EXCLUDED", "calendar_fields"]

DEFAULT_ON_EXCLUDED = "skip"


def calendar_fields(
    schedule: Schedule, calendar: object, on_excluded: object, business_day: object
) -> tuple[str | None, str, int | None]:
    """The calendar's name, what its excluded slots do, and the business-day index."""
    choice = parse_on_excluded(on_excluded)
    index = None if business_day is None else _business_day(business_day)
    if calendar is None:
        if index is not None or choice != DEFAULT_ON_EXCLUDED:
            field_name = "business_day" if index is not None else "on_excluded"
            raise InvalidInput(field_name, "needs a calendar (--calendar NAME)")
        return None, choice, None
    if schedule.at is not None:
        raise InvalidInput("calendar", "a one-off (@at) job has one slot: it takes no calendar")
    return str(calendar), choice, index


def _business_day(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InvalidInput("business_day", "must be a whole number like 1 or -1")
    try:
        number = int(value)
    except ValueError as exc:
        raise InvalidInput("business_day", "must be a whole number like 1 or -1") from exc
    if number == 0 or not -23 <= number <= 23:
        raise InvalidInput("business_day", f"must be 1..23 or -1..-23 (-1: the last), got {number}")
    return number
