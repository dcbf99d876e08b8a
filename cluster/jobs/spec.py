"""A job's definition as users write it, validated before anything touches the database.

The same rules serve ``pulse jobs add``, ``pulse jobs apply FILE`` and the Python API, so
bad input is rejected the same way everywhere: one ``InvalidInput`` naming the field.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cluster.errors import InvalidInput
from cluster.jobs import gates, shellrefs
from cluster.jobs.handlerrefs import canonical, is_forwarded
from cluster.jobs.timerules import DEFAULT_ON_EXCLUDED, calendar_fields
from cluster.timing.catchup import parse_catch_up
from cluster.timing.durations import parse_duration
from cluster.timing.jitter import check_jitter
from cluster.timing.schedule import Schedule, parse_schedule
from ring.zones import normalize_zones

MAX_PAYLOAD_BYTES = 1024 * 1024
MAX_NAME_LENGTH = 200
MAX_COUNT = 2**31 - 1  # Postgres integer
# Added to a timestamp in SQL (the late pass, leases): more would overflow it there, for
# every job of the statement, not just this one.
MAX_DURATION_S = 100 * 365 * 86400.0
DEFAULT_TENANT = "default"
DEFAULT_TZ = "UTC"
DEFAULT_CATCH_UP = "once"
DEFAULT_RETRIES = 0
DEFAULT_DST_REPEATED = "once"
DEFAULT_DST_SKIPPED = "shift"
DEFAULT_OUTPUT_LIMIT = 16 * 1024
MAX_OUTPUT_LIMIT = 256 * 1024
DEFAULT_LATE_AFTER_S = 60.0
OVERLAPS = ("forbid", "allow", "replace")
DEFAULT_OVERLAP = "forbid"
DEFAULT_MAX_CONCURRENT = 10
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
DEFAULT_GRACE_S = 60.0
DEFAULT_MAX_BACKFILL = 100

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
    return value, _count(max_concurrent, "max_concurrent", 1)


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


def parse_payload(value: str | Mapping[str, Any] | None) -> dict[str, Any]:
    """A JSON object (given as text or as a mapping), at most 1 MiB encoded."""
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            loaded = json.loads(value)
        except json.JSONDecodeError as exc:
            raise InvalidInput("payload", f"not valid JSON ({exc.msg})") from exc
        except RecursionError as exc:
            raise InvalidInput("payload", "nested too deeply") from exc
    else:
        loaded = value
    if not isinstance(loaded, dict):
        raise InvalidInput("payload", "must be a JSON object")
    try:
        encoded = json.dumps(loaded, ensure_ascii=False, allow_nan=False).encode()
    except UnicodeEncodeError as exc:
        raise InvalidInput("payload", "is not valid UTF-8 text") from exc
    except RecursionError as exc:
        raise InvalidInput("payload", "nested too deeply") from exc
    except (TypeError, ValueError) as exc:
        raise InvalidInput("payload", f"not JSON-serialisable ({exc})") from exc
    if len(encoded) > MAX_PAYLOAD_BYTES:
        raise InvalidInput("payload", "larger than 1 MiB")
    if _JSON_NUL.search(encoded):
        # jsonb cannot store \u0000: Postgres would refuse the write.
        raise InvalidInput("payload", "must not contain NUL characters (\\u0000)")
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


def _each_zone(value: object, zones: str | Sequence[str] | None) -> bool:
    if not isinstance(value, bool):
        raise InvalidInput("each_zone", "must be true or false")
    if value and len(parse_zones(zones)) == 1:
        raise InvalidInput("each_zone", "with a single zone is --zones alone; name two or more")
    return value


def _duration(value: object, field_name: str) -> float:
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


def _count(value: object, field_name: str, minimum: int) -> int:
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


def _optional_duration(value: object, field_name: str) -> float | None:
    if value is None:
        return None
    seconds = _duration(value, field_name)
    if seconds <= 0:
        raise InvalidInput(field_name, "must be positive")
    return seconds


@dataclass(frozen=True)
class JobSpec:
    """One validated job definition; build it with ``JobSpec.build`` or ``from_mapping``."""

    name: str
    schedule: str
    handler: str
    tenant: str = DEFAULT_TENANT
    tz: str = DEFAULT_TZ
    payload: dict[str, Any] = field(default_factory=dict)
    catch_up: str = DEFAULT_CATCH_UP
    grace_s: float = DEFAULT_GRACE_S
    max_backfill: int = DEFAULT_MAX_BACKFILL
    timeout_s: float = DEFAULT_TIMEOUT_S
    retries: int = DEFAULT_RETRIES
    retry_backoff_s: float = DEFAULT_RETRY_BACKOFF_S
    paused: bool = False
    dst_repeated: str = DEFAULT_DST_REPEATED
    dst_skipped: str = DEFAULT_DST_SKIPPED
    keep_for_s: float | None = None  # None: the cluster's retention
    keep_runs: int | None = None
    output_limit: int = DEFAULT_OUTPUT_LIMIT
    late_after_s: float = DEFAULT_LATE_AFTER_S
    pause_after_failures: int | None = None
    overlap: str = DEFAULT_OVERLAP
    max_concurrent: int = DEFAULT_MAX_CONCURRENT
    cancel_grace_s: float = DEFAULT_CANCEL_GRACE_S
    zones: tuple[str, ...] = ()  # pinned to these zones (docs/zones.md); empty: any zone
    each_zone: bool = False  # one run per slot in every zone with a live node (of `zones`)
    jitter_s: float = 0.0  # each slot starts within [slot, slot + jitter) (cluster.timing.jitter)
    remove_when_done: bool = False  # a one-off (@at) job is deleted once its slot has run
    # A business calendar by name (docs/time.md): what its excluded slots do, and
    # "the n-th business day of the month" (negative: from its end).
    calendar: str | None = None
    on_excluded: str = DEFAULT_ON_EXCLUDED
    business_day: int | None = None
    after: tuple[str, ...] = ()  # upstream jobs of the same tenant (cluster.jobs.gates)
    after_match: str = gates.DEFAULT_MATCH
    after_timeout_s: float | None = None  # a slot held longer is skipped; None: no limit
    after_failure: str = gates.DEFAULT_FAILURE

    @classmethod
    def build(
        cls,
        name: str,
        schedule: str,
        handler: str | Mapping[str, Any],
        *,
        tenant: str = DEFAULT_TENANT,
        tz: str = DEFAULT_TZ,
        payload: str | Mapping[str, Any] | None = None,
        catch_up: str = DEFAULT_CATCH_UP,
        grace: str | float = DEFAULT_GRACE_S,
        max_backfill: int | str = DEFAULT_MAX_BACKFILL,
        timeout: str | float = DEFAULT_TIMEOUT_S,
        retries: int | str = DEFAULT_RETRIES,
        retry_backoff: str | float = DEFAULT_RETRY_BACKOFF_S,
        paused: bool = False,
        dst_repeated: str = DEFAULT_DST_REPEATED,
        dst_skipped: str = DEFAULT_DST_SKIPPED,
        keep_for: str | float | None = None,
        keep_runs: int | str | None = None,
        output_limit: int | str = DEFAULT_OUTPUT_LIMIT,
        late_after: str | float = DEFAULT_LATE_AFTER_S,
        pause_after_failures: int | str | None = None,
        overlap: str = DEFAULT_OVERLAP,
        max_concurrent: int | str | None = None,
        cancel_grace: str | float = DEFAULT_CANCEL_GRACE_S,
        zones: str | Sequence[str] | None = None,
        each_zone: bool = False,
        jitter: str | float = 0.0,
        remove_when_done: bool = False,
        calendar: str | None = None,
        on_excluded: str = DEFAULT_ON_EXCLUDED,
        business_day: int | str | None = None,
        after: str | Sequence[str] | None = None,
        after_match: str = gates.DEFAULT_MATCH,
        after_timeout: str | float | None = None,
        after_failure: str = gates.DEFAULT_FAILURE,
    ) -> JobSpec:
        """Validate every field; raise ``InvalidInput`` naming the first bad one."""
        name = validate_name(name)
        tenant = validate_name(tenant, "tenant")
        if not isinstance(schedule, str):
            raise InvalidInput("schedule", "must be a string")
        if not isinstance(tz, str):
            raise InvalidInput("tz", "must be a string")
        parsed = parse_schedule(schedule, tz, dst_repeated, dst_skipped)  # type: ignore[arg-type]
        timeout_s = _duration(timeout, "timeout")
        if timeout_s <= 0:
            raise InvalidInput("timeout", "must be positive")
        # A job file's {http: ...}, {celery: ...} or {shell: ...} becomes text.
        if isinstance(handler, Mapping) and set(handler) == {"shell"}:
            handler = shellrefs.canonical(handler)
        else:
            handler = canonical(handler, timeout_s)
        if not isinstance(paused, bool):
            raise InvalidInput("paused", "must be true or false")
        limit = parse_size(output_limit, "output_limit")
        if not 0 <= limit <= MAX_OUTPUT_LIMIT:
            raise InvalidInput(
                "output_limit", f"must be between 0 and {MAX_OUTPUT_LIMIT // 1024}KiB"
            )
        late_after_s = _optional_duration(late_after, "late_after")
        assert late_after_s is not None
        overlap, max_concurrent = parse_overlap(overlap, max_concurrent)
        jitter_s = check_jitter(parsed, _duration(jitter, "jitter"))
        if parsed.at is not None and overlap == "allow":
            raise InvalidInput("overlap", "a one-off (@at) job has one slot: allow does not apply")
        if not isinstance(remove_when_done, bool):
            raise InvalidInput("remove_when_done", "must be true or false")
        if calendar is not None:
            calendar = validate_name(calendar, "calendar")
        calendar, on_excluded, business_day = calendar_fields(
            parsed, calendar, on_excluded, business_day
        )
        if calendar is not None and each_zone:
            raise InvalidInput("calendar", "does not apply to an --each-zone job")
        return cls(
            name=name,
            schedule=parsed.expr,
            handler=validate_handler(handler),
            tenant=tenant,
            tz=parsed.tz,
            payload=parse_payload(payload),
            catch_up=parse_catch_up(catch_up),
            grace_s=_duration(grace, "grace"),
            max_backfill=_count(max_backfill, "max_backfill", 1),
            timeout_s=timeout_s,
            retries=_count(retries, "retries", 0),
            retry_backoff_s=_duration(retry_backoff, "retry_backoff"),
            paused=paused,
            dst_repeated=parsed.dst_repeated,
            dst_skipped=parsed.dst_skipped,
            keep_for_s=_optional_duration(keep_for, "keep_for"),
            keep_runs=None if keep_runs is None else _count(keep_runs, "keep_runs", 1),
            output_limit=limit,
            late_after_s=late_after_s,
            pause_after_failures=(
                None
                if pause_after_failures is None
                else _count(pause_after_failures, "pause_after_failures", 1)
            ),
            overlap=overlap,
            max_concurrent=max_concurrent,
            cancel_grace_s=_duration(cancel_grace, "cancel_grace"),
            zones=parse_zones(zones),
            each_zone=_each_zone(each_zone, zones),
            jitter_s=jitter_s,
            remove_when_done=remove_when_done,
            calendar=calendar,
            on_excluded=on_excluded,
            business_day=business_day,
            after=gates.parse_after(after),
            after_match=gates.parse_match(after_match),
            after_timeout_s=_optional_duration(after_timeout, "after_timeout"),
            after_failure=gates.parse_failure(after_failure),
        )

    @classmethod
    def from_mapping(cls, entry: Mapping[str, Any]) -> JobSpec:
        """From a job-file entry whose keys are the long options with underscores."""
        if not isinstance(entry, Mapping):
            raise InvalidInput("entry", "must be a mapping of option names to values")
        known = {
            "name", "schedule", "handler", "tenant", "tz", "payload", "catch_up", "grace",
            "max_backfill", "timeout", "retries", "retry_backoff", "paused", "dst_repeated",
            "dst_skipped", "keep_for", "keep_runs", "output_limit", "late_after",
            "pause_after_failures", "overlap", "max_concurrent", "cancel_grace",
            "zones", "each_zone",
            "jitter", "remove_when_done", "calendar", "on_excluded", "business_day",
            "after", "after_match", "after_timeout", "after_failure",
        }  # fmt: skip
        unknown = sorted(set(entry) - known)
        if unknown:
            raise InvalidInput(unknown[0], "unknown key")
        for required in ("name", "schedule", "handler"):
            if required not in entry:
                raise InvalidInput(required, "missing")
        kwargs = {k: v for k, v in entry.items() if k not in ("name", "schedule", "handler")}
        payload = kwargs.get("payload")
        if payload is not None and not isinstance(payload, Mapping | str):
            raise InvalidInput("payload", "must be a JSON object")
        return cls.build(entry["name"], entry["schedule"], entry["handler"], **kwargs)

    def validated(self) -> JobSpec:
        """This spec checked as ``build`` checks it (``JobSpec(...)`` itself validates nothing)."""
        return JobSpec.build(
            self.name,
            self.schedule,
            self.handler,
            tenant=self.tenant,
            tz=self.tz,
            payload=self.payload,
            catch_up=self.catch_up,
            grace=self.grace_s,
            max_backfill=self.max_backfill,
            timeout=self.timeout_s,
            retries=self.retries,
            retry_backoff=self.retry_backoff_s,
            paused=self.paused,
            dst_repeated=self.dst_repeated,
            dst_skipped=self.dst_skipped,
            keep_for=self.keep_for_s,
            keep_runs=self.keep_runs,
            output_limit=self.output_limit,
            late_after=self.late_after_s,
            pause_after_failures=self.pause_after_failures,
            overlap=self.overlap,
            max_concurrent=self.max_concurrent if self.overlap == "allow" else None,
            cancel_grace=self.cancel_grace_s,
            zones=self.zones or None,
            each_zone=self.each_zone,
            jitter=self.jitter_s,
            remove_when_done=self.remove_when_done,
            calendar=self.calendar,
            on_excluded=self.on_excluded,
            business_day=self.business_day,
            after=self.after or None,
            after_match=self.after_match,
            after_timeout=self.after_timeout_s,
            after_failure=self.after_failure,
        )

    def parsed_schedule(self) -> Schedule:
        return parse_schedule(self.schedule, self.tz, self.dst_repeated, self.dst_skipped)  # type: ignore[arg-type]
