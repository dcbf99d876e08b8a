"""Per-tenant quotas: the ``tenant_quotas`` rows (migration 019) and setting them.

A quota caps what a tenant may ask for: how many jobs it has, how many backfill slots it
has requested and not yet run, and how many slots one of its jobs or backfills may run at
once (a job's ``max_concurrent`` under overlap ``allow``, a backfill's ``max_parallel``).
The database enforces them (triggers of migration 019) on every path that writes, so two
concurrent requests cannot both take the last place; a refusal is ``Conflict`` for a full
count and ``InvalidInput`` for a value past its cap (``cluster.store.queries.store_error``).
A quota applies to what is asked from then on: lowering one removes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from psycopg.types.json import Jsonb

from cluster.errors import InvalidInput
from cluster.jobs.fields import validate_name
from cluster.jobs.models import iso
from cluster.jobs.spec import JobSpec
from cluster.store.connect import Conn
from cluster.store.queries import fetch_all, fetch_one
from cluster.timing.durations import format_duration

__all__ = ["CAPS", "MAX_CAP", "MOST", "Quota", "Quotas", "check_caps", "check_period"]

MAX_CAP = 1_000_000
# Each cap and its least value: a tenant may be allowed no job at all, but a job that may
# run no slot makes no sense. The shortest period, the output a run keeps and how long
# and how many runs a job keeps are caps on what each job asks (seconds, bytes, runs).
CAPS: dict[str, int] = {
    "max_jobs": 0,
    "max_backfill_slots": 0,
    "max_parallel": 1,
    "min_period_s": 1,
    "max_output_limit": 0,
    "max_keep_for_s": 1,
    "max_keep_runs": 1,
}
# The caps that count seconds or bytes go past MAX_CAP (ten years, a gigabyte).
MOST: dict[str, int] = {"min_period_s": 10**9, "max_output_limit": 10**9, "max_keep_for_s": 10**9}


@dataclass(frozen=True)
class Quota:
    tenant: str
    max_jobs: int | None
    max_backfill_slots: int | None
    max_parallel: int | None
    jobs: int  # the tenant's jobs now
    updated_at: datetime
    min_period_s: int | None = None
    max_output_limit: int | None = None
    max_keep_for_s: int | None = None
    max_keep_runs: int | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Quota:
        return cls(
            row["tenant_id"],
            row["max_jobs"],
            row["max_backfill_slots"],
            row["max_parallel"],
            row["jobs"],
            row["updated_at"],
            row["min_period_s"],
            row["max_output_limit"],
            row["max_keep_for_s"],
            row["max_keep_runs"],
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "max_jobs": self.max_jobs,
            "max_backfill_slots": self.max_backfill_slots,
            "max_parallel": self.max_parallel,
            "min_period_s": self.min_period_s,
            "max_output_limit": self.max_output_limit,
            "max_keep_for_s": self.max_keep_for_s,
            "max_keep_runs": self.max_keep_runs,
            "jobs": self.jobs,
            "updated_at": iso(self.updated_at),
        }

    def describe(self) -> str:
        """``max_jobs 5, max_parallel 4`` (the caps set), for output and audit rows."""
        caps = [f"{k} {getattr(self, k)}" for k in CAPS if getattr(self, k) is not None]
        return ", ".join(caps) or "no cap"


def check_caps(changes: Mapping[str, object]) -> dict[str, int | None]:
    """The caps to change, checked: each a whole number in its range, or None to lift it;
    ``InvalidInput`` naming the first bad one, or when none is given."""
    if not changes:
        raise InvalidInput("quota", f"give at least one of {', '.join(CAPS)}")
    checked: dict[str, int | None] = {}
    for key, value in changes.items():
        if key not in CAPS:
            raise InvalidInput(key, f"is not a quota; one of {', '.join(CAPS)}")
        low, high = CAPS[key], MOST.get(key, MAX_CAP)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high
        ):
            raise InvalidInput(
                key, f"must be a whole number from {low} to {high:,} or none, got {value!r}"
            )
        checked[key] = value
    return checked


# How far ahead a schedule's period is checked: a week of slots, at most this many.
PERIOD_HORIZON = timedelta(days=8)
PERIOD_SAMPLES = 20_000


def check_period(spec: JobSpec, min_period_s: int, now: datetime) -> None:
    """``InvalidInput`` on ``schedule`` when two slots of ``spec`` within the next week come
    closer than ``min_period_s`` (a tenant's quota; a calendar only removes slots)."""
    previous = None
    for count, slot in enumerate(spec.parsed_schedule().iter_after(now)):
        if count > PERIOD_SAMPLES or slot - now > PERIOD_HORIZON:
            return
        if previous is not None and (slot - previous).total_seconds() < min_period_s:
            raise InvalidInput(
                "schedule",
                f"tenant {spec.tenant!r} may run a job at most every "
                f"{format_duration(min_period_s)} (min_period_s); {spec.name!r} runs "
                f"{format_duration((slot - previous).total_seconds())} apart",
            )
        previous = slot


class Quotas:
    """The tenants' quotas, on the connection ``conn`` (in the caller's transaction, if
    any, so an audit row commits with the change)."""

    def __init__(self, conn: Conn) -> None:
        self._conn = conn

    async def set(self, tenant: str, changes: Mapping[str, object]) -> Quota | None:
        """Set the caps in ``changes`` (None lifts one), keep the others; the quota as it
        stands, None when no cap is left."""
        tenant = validate_name(tenant, "tenant")
        params = {"tenant_id": tenant, "changes": Jsonb(check_caps(changes))}
        async with self._conn.transaction():
            row = await fetch_one(self._conn, "quota_set", params)
            await fetch_all(self._conn, "quota_prune", {"tenant_id": tenant})
        assert row is not None
        found = Quota.from_row(row)
        return None if found.describe() == "no cap" else found

    async def clear(self, tenant: str) -> None:
        """Lift every cap of ``tenant``; ``InvalidInput`` if it has none."""
        tenant = validate_name(tenant, "tenant")
        if not await fetch_all(self._conn, "quota_remove", {"tenant_id": tenant}):
            raise InvalidInput("tenant", f"{tenant!r} has no quota")

    async def quotas(self, tenant: str | None = None) -> list[Quota]:
        """Every tenant's quota (or ``tenant``'s), with its jobs now."""
        return [
            Quota.from_row(r)
            for r in await fetch_all(self._conn, "tenant_quotas", {"tenant_id": tenant})
        ]
