"""Backfills: requests to run a job's slots of a range again, and queuing their slots.

A request is a row (``backfills``) with a cursor; the nodes holding the job's shard turn
its next slots into queued flights of origin ``backfill`` (``fill``, run by
``node.maintenance.backfiller``), at most ``max_parallel`` in flight, oldest first, and
the flights run as any flight does (``claim_flights``, docs/design/overlap.md). The request, its
cursor and its flights are rows, so a backfill carries on after any node or the whole
cluster dies. Slots come from the schedule in Python, as everywhere (DST included); with
``only_missing`` the slots whose run succeeded are left out, and a slot that ran after the
request was made (another request, the schedule) is never run again by it. Why so:
docs/design/time.md.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cluster.errors import InvalidInput
from cluster.jobs.models import NEVER_DUE, iso
from cluster.store.side import Fetch, SideConnection
from cluster.timing.instants import US
from cluster.timing.schedule import Schedule, parse_schedule

__all__ = ["MAX_SLOTS", "Backfill", "BackfillPlan", "fill", "fill_held", "plan_end", "plan_slots"]

MAX_SLOTS = 100_000  # slots per request
SCAN = 1000  # slots of a request read per pass at most (only_missing skips many)


@dataclass(frozen=True)
class Backfill:
    id: int
    tenant: str
    job: str
    range_from: datetime
    range_to: datetime
    cursor: datetime
    only_missing: bool
    max_parallel: int
    slots_total: int
    slots_queued: int
    in_flight: int
    status: str  # active | done | cancelled
    created_at: datetime
    origin: str = "backfill"  # or rerun: one past slot (`pulse jobs trigger --slot`)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Backfill:
        return cls(
            id=row["id"],
            tenant=row["tenant_id"],
            job=row["job_name"],
            range_from=row["range_from"],
            range_to=row["range_to"],
            cursor=row["cursor_at"],
            only_missing=row["only_missing"],
            max_parallel=row["max_parallel"],
            slots_total=row["slots_total"],
            slots_queued=row["slots_queued"],
            in_flight=row["in_flight"],
            status=row["status"],
            created_at=row["created_at"],
            origin=row.get("origin") or "backfill",
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "tenant": self.tenant,
            "job": self.job,
            "from": iso(self.range_from),
            "to": iso(self.range_to),
            "cursor": iso(self.cursor),
            "only_missing": self.only_missing,
            "max_parallel": self.max_parallel,
            "slots_total": self.slots_total,
            "slots_queued": self.slots_queued,
            "in_flight": self.in_flight,
            "status": self.status,
            "created_at": iso(self.created_at),
            "origin": self.origin,
        }


@dataclass(frozen=True)
class BackfillPlan:
    """What a request would run (``--dry-run``), or the request made. ``cut_at``: the job's
    slot, where the range reached it (the request ends there)."""

    slots: list[datetime]
    backfill: Backfill | None = None
    cut_at: datetime | None = None


def plan_end(start: datetime, end: datetime, job_slot: datetime) -> datetime:
    """The end of a request for ``[start, end)``: ``end``, or the job's slot if the range
    reaches it. A backfill runs slots the job has passed; its own slot and those after it
    are its schedule's to run, and a backfill's run of one would be run again by the job
    (and its record replaced). ``InvalidInput`` for a range as ``plan_slots`` says, or
    one that starts at or after the job's slot."""
    _check_range(start, end)
    if start >= job_slot:
        raise InvalidInput(
            "from",
            f"the job has not passed {start.isoformat()} yet (its slot is "
            f"{job_slot.isoformat()}): a backfill runs slots the job has passed, and its "
            "schedule runs the others",
        )
    return min(end, job_slot)


def _check_range(start: datetime, end: datetime) -> None:
    if start.tzinfo is None or end.tzinfo is None:
        raise InvalidInput("from", "--from and --to need a UTC offset")
    if start >= end:
        raise InvalidInput("to", f"must be after --from ({start.isoformat()})")


def plan_slots(
    schedule: Schedule, start: datetime, end: datetime, cut_at: datetime | None = None
) -> list[datetime]:
    """The slots in ``[start, end)``, oldest first; ``InvalidInput`` for a reversed or empty
    range or one of more than ``MAX_SLOTS`` slots. ``cut_at``: ``end`` is the job's slot,
    which the range asked for reached (said if no slot is left)."""
    _check_range(start, end)
    slots = schedule.slots_between(start, end - US, MAX_SLOTS + 1)
    if not slots:
        before = "" if cut_at is None else f" before the job's slot ({cut_at.isoformat()})"
        raise InvalidInput("from", f"the range holds no slot of the job's schedule{before}")
    if len(slots) > MAX_SLOTS:
        raise InvalidInput("to", f"the range holds more than {MAX_SLOTS:,} slots")
    return slots


async def ran(
    fetch: Fetch,
    job_id: Any,
    slots: Sequence[datetime],
    *,
    only_missing: bool,
    since: datetime | None = None,
) -> set[datetime]:
    """Of ``slots``, those a request leaves out: with ``only_missing`` those whose run
    succeeded, and those whose attempt ended (a skip aside) at or after ``since``, the
    request's creation. So a slot that another request or the schedule ran meanwhile is
    not run again (S1)."""
    params = {"job_id": job_id, "slots": slots, "only_missing": only_missing, "since": since}
    return {row["scheduled_for"] for row in await fetch("backfill_ran", params)}


async def fill(side: SideConnection, shards: Collection[int], now: datetime | None = None) -> int:
    """Queue the next slots of the active backfills of ``shards``; the slots queued."""
    return await fill_held(side, shards, now) or 0


async def fill_held(
    side: SideConnection, shards: Collection[int], now: datetime | None = None
) -> int | None:
    """``fill``, but None when none of ``shards`` has an active backfill (the backfiller
    then asks less often: node/maintenance/backfiller.py)."""
    if not shards:
        return None
    # Most passes find nothing: one statement, outside a transaction, says so.
    (found,) = await side.fetch("backfills_any", {"shards": sorted(shards)})
    if not found["any"]:
        return None
    total = 0
    async with side.transaction("backfill") as fetch:
        for row in await fetch("backfill_active", {"shards": sorted(shards)}):
            total += await _fill_one(fetch, row, now)
    return total


async def _fill_one(fetch: Fetch, row: dict[str, Any], now: datetime | None) -> int:
    if row["job_status"] in NEVER_DUE:
        return 0  # a paused job's backfill waits for it to be resumed
    schedule = parse_schedule(row["schedule"], row["tz"], row["dst_repeated"], row["dst_skipped"])
    room = row["max_parallel"] - row["in_flight"]
    cursor, end = row["cursor_at"], row["range_to"]
    taken: list[datetime] = []
    if room > 0 and cursor < end:
        scanned = schedule.slots_between(cursor, end - US, SCAN)
        done = await ran(
            fetch,
            row["job_id"],
            scanned,
            only_missing=row["only_missing"],
            since=row["created_at"],
        )
        for slot in scanned:
            if slot not in done:
                if len(taken) >= room:
                    break
                taken.append(slot)
            cursor = slot + US
        else:
            if len(scanned) < SCAN:
                cursor = end  # no slot of the range is left
    params = {
        "id": row["id"],
        "job_id": row["job_id"],
        "slots": taken,
        "cursor": cursor,
        "in_flight": row["in_flight"],
        "now": now,
    }
    queued = await fetch("backfill_queue", params)
    return int(queued[0]["queued"]) if queued else 0
