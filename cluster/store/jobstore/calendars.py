"""Business calendars in the ``calendars`` table, and the copy each job keeps of its own.

A job plans its slots with its calendar as JSON text in its row (``jobs.calendar_rule``),
so a claim hands the node everything it needs in one statement. Changing a calendar
therefore rewrites that copy and re-plans the next slot of every job that uses it, in the
change's transaction: a node never sees a job with the new calendar and the old slot.
A part of ``JobStore``, on its scoped connection (docs/design/calendars.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from cluster.errors import Conflict, NotFound
from cluster.jobs.fields import validate_name
from cluster.jobs.models import iso
from cluster.store.jobstore.calendar_rule import Rules
from cluster.store.jobstore.scoped import ScopedConnection
from cluster.timing.calendars import Calendar, format_weekdays

__all__ = ["CalendarInfo", "Calendars", "ReplanResult"]

MAX_SOURCE_LENGTH = 200


@dataclass(frozen=True)
class CalendarInfo:
    name: str
    weekdays: frozenset[int]
    excluded: tuple[date, ...] | None  # None in listings (only counted there)
    excluded_count: int
    source: str
    version: int
    jobs: int
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> CalendarInfo:
        excluded = row.get("excluded")
        return cls(
            name=row["name"],
            weekdays=frozenset(row["weekdays"]),
            excluded=None if excluded is None else tuple(sorted(excluded)),
            excluded_count=len(excluded) if excluded is not None else row["excluded_count"],
            source=row["source"],
            version=row["version"],
            jobs=row["jobs"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
        )

    def calendar(self) -> Calendar:
        return Calendar(self.name, self.weekdays, frozenset(self.excluded or ()))

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "name": self.name,
            "weekdays": format_weekdays(self.weekdays),
            "excluded_count": self.excluded_count,
            "source": self.source,
            "version": self.version,
            "jobs": self.jobs,
            "created_at": iso(self.created_at),
            "updated_at": iso(self.updated_at),
        }
        if self.excluded is not None:
            data["excluded"] = [d.isoformat() for d in self.excluded]
        return data


@dataclass(frozen=True)
class ReplanResult:
    calendar: CalendarInfo
    created: bool
    replanned: tuple[str, ...]  # tenant/name of the jobs whose next slot was planned again


class Calendars:
    def __init__(self, db: ScopedConnection, rules: Rules) -> None:
        self._db = db
        self._rules = rules

    async def put(
        self, calendar: Calendar, *, source: str = "", now: datetime | None = None
    ) -> ReplanResult:
        """Create or replace ``calendar``; re-plan every job that uses it, all or nothing
        (``InvalidInput`` naming a job whose schedule the new calendar never lets run)."""
        name = validate_name(calendar.name, "calendar")
        source = source[:MAX_SOURCE_LENGTH]
        async with self._db.transaction():
            await self._db.one("change_calendar", {"name": name})
            row = await self._db.one(
                "upsert_calendar",
                {
                    "name": name,
                    "weekdays": sorted(calendar.weekdays),
                    "excluded": sorted(calendar.excluded),
                    "source": source,
                },
            )
            assert row is not None
            jobs = await self._db.all("calendar_jobs", {"name": name})
            replanned = await self._rules.replan(jobs, await self._db.db_now(now))
        info = await self.get(name)
        return ReplanResult(info, bool(row["inserted"]), replanned)

    async def list(self) -> list[CalendarInfo]:
        return [CalendarInfo.from_row(r) for r in await self._db.all("list_calendars", {})]

    async def get(self, name: str) -> CalendarInfo:
        row = await self._db.one("get_calendar", {"name": name})
        if row is None:
            raise NotFound(f"no calendar named {name!r}")
        return CalendarInfo.from_row(row)

    async def remove(self, name: str) -> None:
        async with self._db.transaction():
            await self._db.one("change_calendar", {"name": name})
            info = await self.get(name)
            if await self._db.one("remove_calendar", {"name": name}) is None:
                raise Conflict(
                    "calendar", f"{name!r} is used by {info.jobs} job(s); change them first"
                )
