"""Instants as Pulse counts them: whole microseconds, Postgres's timestamp resolution, from
the Unix epoch.

The one home of the epoch and the microsecond, so an ``@every`` slot, a catch-up plan, a
cancel request and a backfill cursor all count the same way (``slot - US`` is the last
instant before ``slot``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cluster.errors import InvalidInput

__all__ = ["EPOCH", "LATEST", "US", "US_PER_S", "checked_instant", "from_micros", "micros"]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
US = timedelta(microseconds=1)
US_PER_S = 1_000_000
LATEST = datetime(9000, 1, 1, tzinfo=UTC)  # far before the markers of jobs never due again


def micros(moment: datetime) -> int:
    """Whole microseconds from the epoch to ``moment`` (an aware datetime)."""
    return (moment - EPOCH) // US


def from_micros(count: int) -> datetime:
    """The instant ``count`` microseconds after the epoch, in UTC."""
    return EPOCH + count * US


def checked_instant(moment: datetime | None, field: str) -> datetime | None:
    """``moment`` if it is an instant a timeline can start from (from the epoch to the year
    9000), else ``InvalidInput`` naming ``field``."""
    if moment is not None and not EPOCH <= moment < LATEST:
        raise InvalidInput(field, f"{moment.isoformat()} is not between 1970 and 9000")
    return moment
