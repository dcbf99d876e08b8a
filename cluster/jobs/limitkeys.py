"""Named limits as users write them: a job's ``uses`` (the keys it takes), and a key's
``--rate`` (``100/min``). Checked before anything touches the database; that the keys exist
(for the job's tenant) is the database's check, made as the job is written
(0.3.0_pre_uses_named_limits, docs/design/limits.md)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from cluster.errors import InvalidInput
from cluster.jobs.fields import validate_name

__all__ = ["MAX_KEYS", "MAX_RATE", "PERIODS", "Rate", "parse_rate", "parse_uses"]

MAX_KEYS = 16  # keys one job may use
MAX_RATE = 10_000  # starts a rate key may allow per period (it keeps a period's starts)
PERIODS = {"s": 1, "min": 60, "h": 3600}
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*(s|min|h)\s*$")
MAX_PERIOD_S = 86_400


@dataclass(frozen=True)
class Rate:
    """At most ``count`` starts in any ``per_s`` seconds."""

    count: int
    per_s: int

    def __str__(self) -> str:
        for unit, seconds in sorted(PERIODS.items(), key=lambda p: -p[1]):
            if self.per_s % seconds == 0:
                times = self.per_s // seconds
                return f"{self.count}/{'' if times == 1 else times}{unit}"
        raise AssertionError("a period is whole seconds")


def parse_rate(text: str) -> Rate:
    """``N/s``, ``N/min`` or ``N/h`` (or a multiple of one: ``6/10s``), N from 1 to
    ``MAX_RATE``, the period at most a day."""
    found = _RATE.match(text) if isinstance(text, str) else None
    if found is None:
        raise InvalidInput("rate", f"must be N/s, N/min or N/h (or N/10s), got {text!r}")
    count = int(found.group(1))
    if not 1 <= count <= MAX_RATE:
        raise InvalidInput("rate", f"must allow 1 to {MAX_RATE:,} starts per period, got {count}")
    per_s = int(found.group(2) or 1) * PERIODS[found.group(3)]
    if not 1 <= per_s <= MAX_PERIOD_S:
        raise InvalidInput("rate", f"needs a period from 1s to 24h, got {text!r}")
    return Rate(count, per_s)


def parse_uses(value: str | Sequence[str] | None, key: str = "uses") -> tuple[str, ...]:
    """``a,b`` (or a list) as a sorted set of key names; () for none."""
    if value is None:
        return ()
    names = value.split(",") if isinstance(value, str) else value
    if isinstance(value, str) and not value.strip():
        return ()
    if not isinstance(names, Sequence):
        raise InvalidInput(key, "must be key names, as a,b or a list")
    found = {validate_name(n.strip() if isinstance(n, str) else n, key) for n in names}
    if len(found) > MAX_KEYS:
        raise InvalidInput(key, f"may name at most {MAX_KEYS} keys")
    return tuple(sorted(found))
