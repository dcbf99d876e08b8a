"""Steering what runs, the part of ``JobStore`` that acts on slots rather than on job
definitions: cancelling running slots (``pulse runs cancel``; docs/design/effects.md) and
backfill requests (``pulse jobs backfill``, ``pulse backfills``; docs/design/time.md).
A mix-in of ``JobStore``, on its connection, scope and statements."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import psycopg

from cluster.errors import InvalidInput, NotRunning, StoreError
from cluster.jobs.models import Job
from cluster.jobs.spec import DEFAULT_TENANT, check_text
from cluster.settings import ClusterSettings
from cluster.store import backfills
from cluster.store.backfills import Backfill, BackfillPlan
from cluster.store.connect import Conn, describe
from cluster.store.notify import CANCEL_PREFIX
from cluster.store.queries import query
from cluster.store.specs import MAX_NOTE_LENGTH


@dataclass(frozen=True)
class CancelRequest:
    """A running slot asked to stop: which, which attempt, and the node running it."""

    slot: datetime
    attempt: int
    node_id: str | None


class Store(Protocol):
    """What the mix-in uses of ``JobStore``."""

    settings: ClusterSettings
    _conn: Conn

    async def get(self, name: str, tenant: str = ...) -> Job: ...
    async def _job(self, statement: str, name: str, tenant: str) -> Job: ...
    async def _notify(self, shard: int) -> None: ...
    async def _one(self, name: str, params: dict[str, Any]) -> dict[str, Any] | None: ...
    async def _all(self, name: str, params: dict[str, Any]) -> list[dict[str, Any]]: ...


class RunControl:
    async def cancel(
        self: Store,
        name: str,
        tenant: str = DEFAULT_TENANT,
        *,
        by: str,
        slot: datetime | None = None,
        every: bool = False,
    ) -> list[CancelRequest]:
        """Ask the node running the job's slot (``slot``, else whichever runs; with
        ``every``, each slot of an overlap ``allow`` job in flight) to stop it: at once
        through NOTIFY when that node listens, else at its next lease renewal, or by
        recovery if it is gone. The slot is recorded ``cancelled`` (``by`` says who asked)
        and not retried. ``NotRunning`` when no such slot is running; ``InvalidInput`` when
        several are and neither ``slot`` nor ``every`` says which."""
        by = " ".join(check_text(by, "by").split())[:MAX_NOTE_LENGTH] or "unknown"
        params = {"tenant_id": tenant, "name": name, "slot": slot, "by": by}
        try:
            async with self._conn.transaction():
                rows = await self._all("cancel_job", params)
                rows += await self._all("cancel_flights", params)
                if len(rows) > 1 and slot is None and not every:
                    raise InvalidInput(
                        "slot", f"{len(rows)} slots of {name!r} are running: give --slot or --all"
                    )
                for row in rows:  # delivered when the transaction commits
                    slot_us = (
                        int(row["slot_at"].timestamp() * 1e6) if row["overlap"] == "allow" else ""
                    )
                    payload = f"{CANCEL_PREFIX}{row['id']}:{row['lease_token']}:{slot_us}:{by}"
                    await self._conn.execute(
                        query("notify"), {"channel": self.settings.wake_channel, "payload": payload}
                    )
        except psycopg.Error as exc:
            raise StoreError(describe(exc)) from exc
        if not rows:
            await self.get(name, tenant)  # NotFound when there is no such job
            which = f"slot {slot.isoformat()} of " if slot is not None else ""
            raise NotRunning(f"no {which}job {name!r} in tenant {tenant!r} is running")
        return [CancelRequest(row["slot_at"], row["attempt"], row["locked_by"]) for row in rows]

    async def backfill(
        self: Store,
        name: str,
        tenant: str = DEFAULT_TENANT,
        *,
        start: datetime,
        end: datetime,
        only_missing: bool = False,
        max_parallel: int = 1,
        dry_run: bool = False,
    ) -> BackfillPlan:
        """Ask for the job's slots in ``[start, end)`` to run again, oldest first, at most
        ``max_parallel`` at once (``only_missing``: those without a succeeded run). With
        ``dry_run``, only the slots it would run. ``InvalidInput`` for a reversed, empty or
        too large range, or a paused or done job; nothing is written then."""
        if isinstance(max_parallel, bool) or not isinstance(max_parallel, int) or max_parallel < 1:
            raise InvalidInput("max_parallel", f"must be a whole number >= 1, got {max_parallel!r}")
        try:
            async with self._conn.transaction():
                job = await self._job("lock_job", name, tenant)
                if job.paused or job.status == "done":
                    state = "paused" if job.paused else "done"
                    raise InvalidInput(
                        "job", f"{name!r} is {state}; a backfill needs an active job"
                    )
                slots = backfills.plan_slots(job.parsed_schedule(), start, end)
                if only_missing:
                    ok = await backfills.succeeded(self._all, job.id, slots)
                    slots = [s for s in slots if s not in ok]
                if dry_run:
                    return BackfillPlan(slots)
                if not slots:
                    raise InvalidInput("from", "every slot of the range has succeeded already")
                params = {
                    "job_id": job.id,
                    "tenant_id": job.tenant,
                    "job_name": job.name,
                    "shard_id": job.shard,
                    "range_from": start,
                    "range_to": end,
                    "only_missing": only_missing,
                    "max_parallel": max_parallel,
                    "slots_total": len(slots),
                }
                made = await self._one("backfill_insert", params)
                assert made is not None
                await self._notify(job.shard)
        except psycopg.Error as exc:
            raise StoreError(describe(exc)) from exc
        return BackfillPlan(slots, Backfill.from_row(made))

    async def backfills(self: Store, tenant: str | None = None) -> list[Backfill]:
        """Every backfill request, oldest first, with its progress."""
        return [
            Backfill.from_row(r) for r in await self._all("backfill_list", {"tenant_id": tenant})
        ]

    async def cancel_backfill(self: Store, backfill_id: int) -> Backfill:
        """Stop a backfill: nothing more is queued, queued slots are dropped, running ones
        finish. ``InvalidInput`` for an unknown id."""
        row = await self._one("backfill_cancel", {"id": backfill_id})
        if row is None:
            raise InvalidInput("id", f"no backfill {backfill_id}")
        return Backfill.from_row(row)
