"""Human-readable durations: ``500ms``, ``30s``, ``1h30m``, ``2d`` <-> float seconds.

One grammar for every duration a user types (``@every`` schedules, timeouts, grace periods,
CLI flags), so that ``@every 90s`` and ``--timeout 90s`` can never disagree. Internally
durations are float seconds, named ``*_s`` (see STYLE.md).

Grammar: one or more ``<number><unit>`` parts, units ``d h m s ms`` each at most once and in
that (decreasing) order, no spaces inside, lowercase; or a plain non-negative number, which
means seconds (``"90"``, ``"1.5"``). Numbers are decimal (``1.5h`` is 90 minutes), never signed,
never exponent notation.
"""

from __future__ import annotations

import math
import re

from cluster.errors import InvalidInput

__all__ = ["format_duration", "parse_duration"]

_NUMBER = r"[0-9]+(?:\.[0-9]+)?"  # ASCII only: \d would accept other scripts' digits
_UNIT_SECONDS: dict[str, float] = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
# ``m(?!s)`` keeps "5ms" from being read as five minutes followed by a stray "s".
_ORDERED = re.compile(
    rf"(?:(?P<d>{_NUMBER})d)?(?:(?P<h>{_NUMBER})h)?(?:(?P<m>{_NUMBER})m(?!s))?"
    rf"(?:(?P<s>{_NUMBER})s)?(?:(?P<ms>{_NUMBER})ms)?"
)
_PLAIN = re.compile(_NUMBER)
_ANY_PARTS = re.compile(rf"(?:{_NUMBER}(?:ms|d|h|m|s))+")
_EXAMPLES = "expected a duration like 500ms, 30s, 5m, 1h30m or 2d"


def parse_duration(text: str, field: str = "duration") -> float:
    """Return the number of seconds ``text`` denotes; ``InvalidInput(field, ...)`` if it is bad."""
    if not isinstance(text, str):
        raise InvalidInput(field, f"{_EXAMPLES}, got {text!r}")
    stripped = text.strip()
    if not stripped:
        raise InvalidInput(field, f"is empty; {_EXAMPLES}")
    if stripped.startswith("-"):
        raise InvalidInput(field, f"must not be negative, got {text!r}")
    if _PLAIN.fullmatch(stripped):
        seconds = float(stripped)
    else:
        match = _ORDERED.fullmatch(stripped)
        if match is None:
            if _ANY_PARTS.fullmatch(stripped):
                raise InvalidInput(
                    field, f"units must appear at most once each, in the order d h m s ms: {text!r}"
                )
            raise InvalidInput(field, f"{_EXAMPLES}, got {text!r}")
        seconds = sum(
            float(value) * _UNIT_SECONDS[unit]
            for unit, value in match.groupdict().items()
            if value is not None
        )
    if not math.isfinite(seconds):
        raise InvalidInput(field, f"is too large: {text!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """Render ``seconds`` in the grammar ``parse_duration`` reads, rounded to the millisecond.

    ``5400 -> "1h30m"``, ``0.5 -> "500ms"``, ``0 -> "0s"``, ``90061.25 -> "1d1h1m1s250ms"``.
    Negative values get a leading ``-`` (useful for logging lag; ``parse_duration`` rejects it).
    """
    if not math.isfinite(seconds):
        raise ValueError(f"cannot format a non-finite duration: {seconds!r}")
    total_ms = round(seconds * 1000)
    if total_ms < 0:
        return "-" + format_duration(-total_ms / 1000)
    if total_ms == 0:
        return "0s"
    parts: list[str] = []
    for unit, size_ms in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        count, total_ms = divmod(total_ms, size_ms)
        if count:
            parts.append(f"{count}{unit}")
    if total_ms:
        parts.append(f"{total_ms}ms")
    return "".join(parts)
