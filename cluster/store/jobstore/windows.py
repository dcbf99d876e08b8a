"""Blackout windows in the ``windows`` table: ``[from, to)`` for one job, a tenant's jobs,
the jobs with a label (of a tenant or of every tenant) or the whole cluster, whose slots
are skipped or, with ``defer``, run at the window's end as the job's catch-up policy says.
Adding or removing one re-plans the jobs it covers in the same transaction
(``Rules.replan``). A part of ``JobStore`` (docs/time.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cluster.errors import InvalidInput, NotFound
from cluster.jobs.fields import check_text, validate_name
from cluster.jobs.labels import parse_label
from cluster.jobs.models import iso
from cluster.store.jobstore.calendar_rule import Rules
from cluster.store.jobstore.scoped import ScopedConnection

__all__ = ["SCOPES", "BlackoutWindow", "Windows"]

SCOPES = ("job", "tenant", "cluster", "label")
MAX_NOTE = 500


@dataclass(frozen=True)
class BlackoutWindow:
    id: int
    starts_at: datetime
    ends_at: datetime
    scope: str
    tenant: str | None
    job: str | None
    defer: bool
    note: str | None
    created_at: datetime
    label: tuple[str, str] | None = None  # scope `label`: the jobs whose key is value

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> BlackoutWindow:
        key = row.get("label_key")
        return cls(
            row["id"], row["starts_at"], row["ends_at"], row["window_scope"], row["tenant_id"],
            row["job_name"], row["defer"], row["note"], row["created_at"],
            None if key is None else (key, row["label_value"]),
        )  # fmt: skip

    def target(self) -> str:
        if self.scope == "cluster":
            return "cluster"
        if self.label is not None:
            where = "" if self.tenant is None else f" in tenant {self.tenant}"
            return f"label {self.label[0]}={self.label[1]}{where}"
        return (
            f"tenant {self.tenant}" if self.scope == "tenant" else f"job {self.tenant}/{self.job}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "from": iso(self.starts_at),
            "to": iso(self.ends_at),
            "scope": self.scope,
            "tenant": self.tenant,
            "job": self.job,
            "label": None if self.label is None else f"{self.label[0]}={self.label[1]}",
            "defer": self.defer,
            "note": self.note,
            "created_at": iso(self.created_at),
        }


@dataclass(frozen=True)
class WindowChange:
    window: BlackoutWindow
    replanned: tuple[str, ...]


class Windows:
    def __init__(self, db: ScopedConnection, rules: Rules) -> None:
        self._db = db
        self._rules = rules

    async def add(
        self,
        starts_at: datetime,
        ends_at: datetime,
        *,
        job: str | None = None,
        tenant: str | None = None,
        label: tuple[str, str] | None = None,
        defer: bool = False,
        note: str | None = None,
        now: datetime | None = None,
    ) -> WindowChange:
        """A window for ``job`` (of ``tenant``), the jobs with ``label`` (of ``tenant``, or
        of every tenant), all of ``tenant``'s jobs, or, with none, the cluster's;
        ``InvalidInput`` (nothing written) for one that ends before it starts, is over
        already, or names a job that does not exist."""
        for name, moment in (("from", starts_at), ("to", ends_at)):
            if moment.tzinfo is None or moment.utcoffset() is None:
                raise InvalidInput(name, "needs a UTC offset, e.g. 2026-01-01T00:00:00+00:00")
        if ends_at <= starts_at:
            raise InvalidInput("to", f"{ends_at.isoformat()} is not after {starts_at.isoformat()}")
        if note is not None:
            note = check_text(note, "note").strip()[:MAX_NOTE] or None
        scope = "cluster" if tenant is None and job is None else "job" if job else "tenant"
        if label is not None:
            if job is not None:
                raise InvalidInput("label", "give --job or --label, not both")
            scope, label = "label", parse_label(f"{label[0]}={label[1]}")
        if job is not None:
            job = validate_name(job, "job")
            tenant = validate_name(tenant or "default", "tenant")
        elif tenant is not None:
            tenant = validate_name(tenant, "tenant")
        async with self._db.transaction():
            db_now = await self._db.db_now(now)
            if ends_at <= db_now:
                raise InvalidInput("to", f"{ends_at.isoformat()} is in the past")
            if job is not None:
                try:
                    await self._db.job("get_job", job, tenant or "default")
                except NotFound as exc:  # a window for no job is bad input, like a bad time
                    raise InvalidInput("job", f"no job {job!r} in tenant {tenant}") from exc
            row = await self._db.one(
                "add_window",
                {
                    "starts_at": starts_at, "ends_at": ends_at, "window_scope": scope,
                    "tenant_id": tenant, "job_name": job, "defer": defer, "note": note,
                    "label_key": label and label[0], "label_value": label and label[1],
                },
            )  # fmt: skip
            assert row is not None
            replanned = await self._replan(row, db_now)
        return WindowChange(BlackoutWindow.from_row(row), replanned)

    async def list(self) -> list[BlackoutWindow]:
        return [BlackoutWindow.from_row(r) for r in await self._db.all("list_windows", {})]

    async def remove(self, window_id: int, *, now: datetime | None = None) -> WindowChange:
        """Remove a window; the jobs it covered plan their next slots without it."""
        async with self._db.transaction():
            row = await self._db.one("remove_window", {"id": window_id})
            if row is None:
                raise NotFound(f"no blackout window {window_id}")
            replanned = await self._replan(row, await self._db.db_now(now))
        return WindowChange(BlackoutWindow.from_row(row), replanned)

    async def _replan(self, row: dict[str, Any], db_now: datetime) -> tuple[str, ...]:
        params = {
            "window_scope": row["window_scope"],
            "tenant_id": row["tenant_id"],
            "job_name": row["job_name"],
            "label_key": row["label_key"],
            "label_value": row["label_value"],
        }
        jobs = await self._db.all("window_jobs", params)
        return await self._rules.replan(jobs, db_now)
