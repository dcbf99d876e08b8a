"""When an API token stops working, as ``pulse tokens create --expires`` takes it: a
duration from now (``90d``, the default), an ISO 8601 time, or ``never``.

A duration is handed to the database, which adds it to its own clock (token expiry is
checked by the database clock); an ISO time is stored as given. Only the check that an ISO
time lies in the future reads this host's clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from cluster.errors import InvalidInput
from cluster.timing.durations import parse_duration

__all__ = ["DEFAULT_EXPIRES", "Expiry", "parse_expiry"]

DEFAULT_EXPIRES = "90d"
NEVER = "never"
MAX_EXPIRES_S = 100 * 365 * 86400.0


@dataclass(frozen=True)
class Expiry:
    after_s: float | None = None  # from the database's now
    at: datetime | None = None

    @property
    def never(self) -> bool:
        return self.after_s is None and self.at is None


def parse_expiry(text: str, field: str = "expires", now: datetime | None = None) -> Expiry:
    """``30d`` (any duration), ``2027-01-01T00:00:00Z`` (UTC when it has no offset) or
    ``never``; ``InvalidInput(field, ...)`` for anything else, or a time not in the future."""
    stripped = text.strip()
    if stripped.lower() == NEVER:
        return Expiry()
    if stripped[:4].isdigit() and stripped[4:5] == "-":
        try:
            at = datetime.fromisoformat(stripped)
        except ValueError as exc:
            raise InvalidInput(field, f"{text!r} is not an ISO 8601 time") from exc
        at = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
        if at <= (now or datetime.now(UTC)):
            raise InvalidInput(field, f"{text!r} is in the past")
        return Expiry(at=at)
    seconds = parse_duration(stripped, field)
    if seconds <= 0:
        raise InvalidInput(field, "must be positive (or never)")
    if seconds > MAX_EXPIRES_S:
        raise InvalidInput(field, "must be at most 100 years (or never)")
    return Expiry(after_s=seconds)
