"""Dependencies between jobs as users write them: ``after`` (upstream names), the match rule
that pairs a downstream slot with its upstream's, and what an upstream failure does.

Pure checks, no I/O: the store resolves names, refuses cycles and asks ``check_match`` with
the upstreams' schedules before it writes an edge (docs/design/gates.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from cluster.errors import InvalidInput
from cluster.timing.instants import US
from cluster.timing.schedule import Schedule

MATCHES = ("same", "latest", "period:day", "period:hour")
CHAIN = "chain"  # the edges of a chained (@after:A) job: one slot per success of A
DEFAULT_MATCH = "same"
FAILURES = ("block", "run", "skip")
DEFAULT_FAILURE = "block"
# How long a slot waits for its upstreams without --after-timeout: then it is recorded
# skipped with what it waited for. gate_hold (migration `0.2.0_pre_gates_bounded_waits`)
# holds the same bound (tests/integration/test_bounded_waits.py).
DEFAULT_AFTER_TIMEOUT_S = 86400.0
MAX_UPSTREAMS = 32
# Slots of the downstream checked against the upstream's schedule at apply.
_PROBE_SLOTS = 48


def parse_after(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """Upstream job names: a comma-separated string or a list; sorted, de-duplicated."""
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else list(value)
    names: set[str] = set()
    for item in items:
        if not isinstance(item, str) or not item.strip():
            raise InvalidInput("after", "upstream names must be non-empty strings")
        names.add(item.strip())
    if len(names) > MAX_UPSTREAMS:
        raise InvalidInput("after", f"at most {MAX_UPSTREAMS} upstreams")
    return tuple(sorted(names))


def chained(
    schedule: Schedule,
    after: object,
    match: object,
    overlap: str,
    jitter_s: float,
    calendar: object,
) -> tuple[tuple[str, ...], str]:
    """(upstreams, ``chain``) of a job whose schedule is ``@after:A[,B]``; ``InvalidInput``
    for options that cannot go with it."""
    names = schedule.chain
    if after is not None and after != () and parse_after(after) != names:  # type: ignore[arg-type]
        raise InvalidInput(
            "after", f"a chained job's upstreams are its schedule's: {', '.join(names)}"
        )
    if match not in (DEFAULT_MATCH, CHAIN):
        raise InvalidInput("after_match", "a chained (@after:) job pairs the same slots")
    if overlap != "forbid":
        raise InvalidInput("overlap", "a chained (@after:) job runs its slots one at a time")
    if jitter_s:
        raise InvalidInput("jitter", "a chained (@after:) job starts when its upstreams succeed")
    if calendar is not None:
        raise InvalidInput("calendar", "a chained (@after:) job has no clock to shape")
    return parse_after(list(names)), CHAIN


def parse_match(value: object) -> str:
    if value == CHAIN:
        return CHAIN  # set by `chained`, checked again by JobSpec.validated
    if value not in MATCHES:
        raise InvalidInput("after_match", f"{value!r} is not one of {', '.join(MATCHES)}")
    assert isinstance(value, str)
    return value


def parse_failure(value: object) -> str:
    if value not in FAILURES:
        raise InvalidInput("after_failure", f"{value!r} is not one of {', '.join(FAILURES)}")
    assert isinstance(value, str)
    return value


def _period(slot: datetime, unit: str, tz: str) -> tuple[datetime, datetime]:
    local = slot.astimezone(ZoneInfo(tz))
    if unit == "day":
        start = local.replace(hour=0, minute=0, second=0, microsecond=0)
        return start, start + timedelta(days=1)  # wall-clock arithmetic: DST days too
    start = local.replace(minute=0, second=0, microsecond=0)
    return start, start + timedelta(hours=1)


def check_match(
    name: str,
    schedule: Schedule,
    tz: str,
    upstream: str,
    upstream_schedule: Schedule,
    match: str,
    now: datetime,
) -> None:
    """``InvalidInput`` when ``match`` can never pair a slot of the downstream with one of
    ``upstream``'s: ``same`` with a slot the upstream does not have, ``period`` with a period
    in which it has none. Checked over the downstream's next slots."""
    if match == "latest":
        return
    if upstream_schedule.chain:
        raise InvalidInput(
            "after_match",
            f"{match}: {upstream} is chained (@after:) and has no slots of its own to pair "
            f"with; chain {name} to it with @after:{upstream}",
        )
    slot = schedule.at or schedule.next_after(now)
    for _ in range(_PROBE_SLOTS):
        if match == "same":
            hit = upstream_schedule.at or upstream_schedule.next_after(slot - US)
            if hit != slot:
                raise InvalidInput(
                    "after_match",
                    f"same: {name}'s slot {slot.isoformat()} is not a slot of {upstream}",
                )
        else:
            lo, hi = _period(slot, match.split(":")[1], tz)
            hit = upstream_schedule.at or upstream_schedule.next_after(lo - US)
            if not lo <= hit < hi:
                raise InvalidInput(
                    "after_match",
                    f"{match}: {upstream} has no slot in the period of {name}'s slot "
                    f"{slot.isoformat()}",
                )
        if schedule.at is not None:
            return
        slot = schedule.next_after(slot)
