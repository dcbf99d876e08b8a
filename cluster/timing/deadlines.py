"""Deadlines: ``--deadline 06:00``, a wall-clock time in the job's zone by which the run of
a slot should have ended, as an instant (pure, no clock).

A slot's deadline is the first time the wall clock of the job's zone reads that time
strictly after the slot, so a job at 23:00 with a 06:00 deadline has until 06:00 the next
morning. The wall time is mapped to UTC by the same rules as schedule times
(``cluster.timing.schedule``): in a repeated hour its first occurrence, in a skipped hour
the first valid instant after the gap (tests/unit/test_deadlines.py).
"""

from __future__ import annotations

import re
from datetime import datetime

from cluster.errors import InvalidInput
from cluster.timing.schedule import parse_schedule

_DEADLINE = re.compile(r"^([01]?[0-9]|2[0-3]):([0-5][0-9])$")


def parse_deadline(value: object, field_name: str = "deadline") -> str:
    """``HH:MM`` (24-hour) normalised to two-digit hours; ``InvalidInput`` otherwise."""
    if not isinstance(value, str):
        raise InvalidInput(field_name, "must be a wall-clock time HH:MM, like 06:00")
    found = _DEADLINE.match(value.strip())
    if found is None:
        raise InvalidInput(field_name, f"{value!r} is not a wall-clock time HH:MM, like 06:00")
    return f"{int(found[1]):02d}:{found[2]}"


def deadline_after(slot: datetime, deadline: str, tz: str) -> datetime:
    """The UTC instant of the first ``deadline`` wall time in ``tz`` strictly after ``slot``."""
    hour, minute = parse_deadline(deadline).split(":")
    daily = parse_schedule(f"{int(minute)} {int(hour)} * * *", tz, "once", "shift")
    return daily.next_after(slot)
