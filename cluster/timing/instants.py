"""Instants as Pulse counts them: whole microseconds, Postgres's timestamp resolution, from
the Unix epoch.

The one home of the epoch and the microsecond, so an ``@every`` slot, a catch-up plan, a
cancel request and a backfill cursor all count the same way (``slot - US`` is the last
instant before ``slot``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

__all__ = ["EPOCH", "US", "US_PER_S", "from_micros", "micros"]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
US = timedelta(microseconds=1)
US_PER_S = 1_000_000


def micros(moment: datetime) -> int:
    """Whole microseconds from the epoch to ``moment`` (an aware datetime)."""
    return (moment - EPOCH) // US


def from_micros(count: int) -> datetime:
    """The instant ``count`` microseconds after the epoch, in UTC."""
    return EPOCH + count * US
