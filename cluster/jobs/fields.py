"""The fields of a job definition, each parsed and checked on its own: names, texts,
handlers, payloads, sizes, durations, counts, flags, overlap and zones, with their defaults
and limits. ``cluster.jobs.spec`` declares which field each parser serves and puts them
together into a ``JobSpec``. A parser of a field checked on its own takes the value as given
and the key to name in its error (``cluster.jobs.options.Parser``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from cluster.errors import InvalidInput
from cluster.jobs import shellrefs
from cluster.jobs.handlerrefs import canonical, is_forwarded
from cluster.timing.catchup import DEFAULT_CATCH_UP as DEFAULT_CATCH_UP
from cluster.timing.catchup import DEFAULT_GRACE_S as DEFAULT_GRACE_S
from cluster.timing.catchup import DEFAULT_MAX_BACKFILL as DEFAULT_MAX_BACKFILL
from cluster.timing.durations import parse_duration
from ring.zones import normalize_zones

MAX_PAYLOAD_BYTES = 1024 * 1024
# Objects and lists nested in one another in a payload or a schema: deeper ones are refused
# where they are parsed, as the API's answers could not be encoded (tests/unit/test_payloads.py).
MAX_JSON_DEPTH = 100
MAX_NAME_LENGTH = 200
MAX_COUNT = 2**31 - 1  # Postgres integer
# Added to a timestamp in SQL (the late pass, leases): more would overflow it there, for
# every job of the statement, not just this one.
MAX_DURATION_S = 100 * 365 * 86400.0
DEFAULT_TENANT = "default"
DEFAULT_TZ = "UTC"
# DEFAULT_CATCH_UP, DEFAULT_GRACE_S, DEFAULT_MAX_BACKFILL: imported from their policy's module.
DEFAULT_RETRIES = 0
DEFAULT_DST_REPEATED = "once"
DEFAULT_DST_SKIPPED = "shift"
DEFAULT_OUTPUT_LIMIT = 16 * 1024
MAX_OUTPUT_LIMIT = 256 * 1024
DEFAULT_LATE_AFTER_S = 60.0
OVERLAPS = ("forbid", "allow", "replace")
DEFAULT_OVERLAP = "forbid"
DEFAULT_MAX_CONCURRENT = 10
# A job's priority among its tenant's due slots (docs/design/fairness.md, "Priorities").
DEFAULT_PRIORITY = 0
MAX_PRIORITY = 100
DEFAULT_CANCEL_GRACE_S = 10.0
_SIZE = re.compile(r"^\s*(\d+)\s*(b|k|kb|kib|m|mb|mib)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {
    "b": 1,
    "k": 1024,
    "kb": 1024,
    "kib": 1024,
    "m": 1 << 20,
    "mb": 1 << 20,
    "mib": 1 << 20,
}
DEFAULT_TIMEOUT_S = 300.0
DEFAULT_RETRY_BACKOFF_S = 10.0

# A \u0000 escape in JSON text: preceded by an even number of backslashes.
_JSON_NUL = re.compile(rb"(?<!\\)(?:\\\\)*\\u0000")
_PY_REF = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")


def check_text(value: str, field_name: str) -> str:
    """Text Postgres can store: encodable as UTF-8 and free of NUL characters."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(field_name, "is not valid UTF-8 text") from exc
    if "\x00" in value:
        raise InvalidInput(field_name, "must not contain NUL characters")
    return value


def validate_handler(ref: str) -> str:
    """``package.module:function``, ``shell:`` (``cluster.jobs.shellrefs``), or ``http:`` /
    ``celery:`` (``cluster.jobs.handlerrefs``)."""
    ref = check_text(ref, "handler").strip()
    if is_forwarded(ref):
        return canonical(ref)
    if shellrefs.is_shell(ref):
        return shellrefs.canonical(ref)
    if not _PY_REF.match(ref):
        raise InvalidInput(
            "handler", f"{ref!r} is not 'package.module:function' or 'shell:<command>'"
        )
    return ref


def parse_overlap(value: object, max_concurrent: int | str | None) -> tuple[str, int]:
    """The overlap policy and the in-flight limit that goes with it (``allow`` only)."""
    if value not in OVERLAPS:
        raise InvalidInput("overlap", f"{value!r} is not one of {', '.join(OVERLAPS)}")
    assert isinstance(value, str)
    if max_concurrent is None:
        return value, DEFAULT_MAX_CONCURRENT
    if value != "allow":
        raise InvalidInput("max_concurrent", f"applies to overlap allow only, not {value}")
    return value, count_field(max_concurrent, "max_concurrent", 1)


def validate_name(value: str, field_name: str = "name") -> str:
    if not isinstance(value, str):
        raise InvalidInput(field_name, f"must be a string, got {value!r}")
    if not check_text(value, field_name).strip():
        raise InvalidInput(field_name, "must not be empty")
    if len(value) > MAX_NAME_LENGTH:
        raise InvalidInput(field_name, f"longer than {MAX_NAME_LENGTH} characters")
    if any(ord(ch) < 32 for ch in value):
        raise InvalidInput(field_name, "must not contain control characters")
    return value


def too_deep(value: object, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``value`` nests objects and lists more than ``limit`` levels (walked without
    recursion, so a value of any depth gets an answer)."""
    stack = [(value, 1)]
    while stack:
        found, depth = stack.pop()
        if isinstance(found, dict):
            children: Iterable[object] = found.values()
        elif isinstance(found, list):
            children = found
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def parse_payload(
    value: str | Mapping[str, Any] | None, field_name: str = "payload"
) -> dict[str, Any]:
    """A JSON object (given as text or as a mapping), at most 1 MiB encoded."""
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            loaded = json.loads(value)
        except json.JSONDecodeError as exc:
            raise InvalidInput(field_name, f"not valid JSON ({exc.msg})") from exc
        except RecursionError as exc:
            raise InvalidInput(field_name, "nested too deeply") from exc
    else:
        loaded = value
    if not isinstance(loaded, dict):
        raise InvalidInput(field_name, "must be a JSON object")
    if too_deep(loaded):
        raise InvalidInput(field_name, f"nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        encoded = json.dumps(loaded, ensure_ascii=False, allow_nan=False).encode()
    except UnicodeEncodeError as exc:
        raise InvalidInput(field_name, "is not valid UTF-8 text") from exc
    except RecursionError as exc:
        raise InvalidInput(field_name, "nested too deeply") from exc
    except (TypeError, ValueError) as exc:
        raise InvalidInput(field_name, f"not JSON-serialisable ({exc})") from exc
    if len(encoded) > MAX_PAYLOAD_BYTES:
        raise InvalidInput(field_name, "larger than 1 MiB")
    if _JSON_NUL.search(encoded):
        # jsonb cannot store \u0000: Postgres would refuse the write.
        raise InvalidInput(field_name, "must not contain NUL characters (\\u0000)")
    return dict(loaded)


def parse_zones(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """``a,b`` (or a list) as a sorted zone set; () for none; each name as a node's --zone."""
    if value is None:
        return ()
    names = value.split(",") if isinstance(value, str) else value
    if not isinstance(names, Sequence) or not names:
        raise InvalidInput("zones", "must name at least one zone")
    try:
        return normalize_zones(n.strip() if isinstance(n, str) else n for n in names)
    except ValueError as exc:
        raise InvalidInput("zones", str(exc)) from exc


def each_zone_flag(value: object, zones: tuple[str, ...]) -> bool:
    """``each_zone`` against the job's parsed ``zones``."""
    if not isinstance(value, bool):
        raise InvalidInput("each_zone", "must be true or false")
    if value and len(zones) == 1:
        raise InvalidInput("each_zone", "with a single zone is --zones alone; name two or more")
    return value


def duration_field(value: object, field_name: str) -> float:
    if isinstance(value, bool):
        raise InvalidInput(field_name, "must be a duration such as 30s or 5m")
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise InvalidInput(field_name, f"must be a finite duration, got {value!r}")
        if value < 0:
            raise InvalidInput(field_name, "must not be negative")
        seconds = float(value)
    elif isinstance(value, str):
        seconds = parse_duration(value, field_name)
    else:
        raise InvalidInput(field_name, "must be a duration such as 30s or 5m")
    if seconds > MAX_DURATION_S:
        raise InvalidInput(field_name, "must be at most 100 years")
    return seconds


def count_field(value: object, field_name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InvalidInput(field_name, "must be a whole number")
    try:
        number = int(value)
    except ValueError as exc:
        raise InvalidInput(field_name, "must be a whole number") from exc
    if number < minimum:
        raise InvalidInput(field_name, f"must be at least {minimum}")
    if number > MAX_COUNT:
        raise InvalidInput(field_name, f"must be at most {MAX_COUNT}")
    return number


def priority_field(value: object, field_name: str) -> int:
    """A job's priority: a whole number from 0 (the default) to ``MAX_PRIORITY``."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InvalidInput(field_name, f"must be a whole number from 0 to {MAX_PRIORITY}")
    try:
        number = int(value)
    except ValueError as exc:
        raise InvalidInput(field_name, f"must be a whole number from 0 to {MAX_PRIORITY}") from exc
    if not 0 <= number <= MAX_PRIORITY:
        raise InvalidInput(field_name, f"must be a whole number from 0 to {MAX_PRIORITY}")
    return number


def parse_size(value: object, field_name: str) -> int:
    """A byte count: ``16384``, ``16KiB``, ``256k``, ``1MiB`` (binary multiples)."""
    if isinstance(value, bool):
        raise InvalidInput(field_name, "must be a size like 16KiB")
    if isinstance(value, int):
        return value
    match = _SIZE.match(value) if isinstance(value, str) else None
    if match is None:
        raise InvalidInput(field_name, f"{value!r} is not a size like 16384, 16KiB or 256k")
    return int(match[1]) * _SIZE_UNITS[(match[2] or "b").lower()]


def optional_duration(value: object, field_name: str) -> float | None:
    if value is None:
        return None
    seconds = duration_field(value, field_name)
    if seconds <= 0:
        raise InvalidInput(field_name, "must be positive")
    return seconds


def positive_duration(value: object, field_name: str) -> float:
    seconds = duration_field(value, field_name)
    if seconds <= 0:
        raise InvalidInput(field_name, "must be positive")
    return seconds


def counts(minimum: int, *, optional: bool = False) -> Callable[[object, str], int | None]:
    """The parser of a whole number of at least ``minimum`` (``optional``: or None)."""

    def parse(value: object, field_name: str) -> int | None:
        if value is None and optional:
            return None
        return count_field(value, field_name, minimum)

    return parse


def flag(value: object, field_name: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidInput(field_name, "must be true or false")
    return value


def output_size(value: object, field_name: str) -> int:
    """Bytes kept per part of a run's output, at most ``MAX_OUTPUT_LIMIT``."""
    limit = parse_size(value, field_name)
    if not 0 <= limit <= MAX_OUTPUT_LIMIT:
        raise InvalidInput(field_name, f"must be between 0 and {MAX_OUTPUT_LIMIT // 1024}KiB")
    return limit
