"""Alerts in Postgres: the rules (admin), and the outbox's deliveries and the late pass (a
node's alert services).

``AlertStore`` works on a side connection (``cluster.store.side``): the admin's, or a
node's upkeep connection, never the lock session or the result writer, so a slow webhook
or a long outbox never delays a claim or a completion (a delivery holds no connection
while it sends). Events
themselves are written by the statements that change the state they report (``complete``,
``recover``, ``late_pass``) through ``raise_alert`` (migration 006).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any
from uuid import UUID

from cluster.alerts.rules import AlertEvent, AlertRule
from cluster.errors import InvalidInput, NotFound
from cluster.jobs.models import Job, iso
from cluster.settings import ClusterSettings
from cluster.store.housekeeping import watches
from cluster.store.side import Fetch, SideConnection


class DeliveryStatus(StrEnum):
    """Where an alert's delivery stands (the ``alert_deliveries.status`` check)."""

    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"  # given up after its attempts


DELIVERY_STATUSES: tuple[str, ...] = tuple(s.value for s in DeliveryStatus)
Row = dict[str, Any]


@dataclass(frozen=True)
class ExpectMark:
    """An expectation event (``slow``, ``overdue``) to raise for the run of one slot."""

    job_id: UUID
    slot: datetime
    token: int
    event: str
    detail: str
    flight: bool


@dataclass(frozen=True)
class LateFound:
    """What one late pass found (``AlertStore.late_pass_all``)."""

    late: list[dict[str, Any]]  # the slots marked late (``late_pass``)
    missed: list[Job]  # watch jobs whose awaited slot had no ping in time
    timed_out: list[watches.TimedOut]  # watched runs past their timeout
    expect_runs: list[Row]  # the runs going on of jobs with a time expectation


@dataclass(frozen=True)
class Delivery:
    """One event leased to this node for one rule."""

    id: int
    attempts: int  # including this one
    rule: str
    url: str
    format: str
    secret_env: str | None
    legacy_signature: bool
    db_now: datetime
    event: AlertEvent


@dataclass(frozen=True)
class DeliveryRow:
    """A delivery as ``pulse alerts deliveries`` lists it (the webhook is not included)."""

    id: int
    rule: str
    status: str
    attempts: int
    next_attempt_at: datetime
    locked_by: str | None
    last_error: str | None
    delivered_at: datetime | None
    created_at: datetime
    event_id: str
    event: str
    tenant: str
    job: str
    slot: datetime | None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "rule": self.rule,
            "event_id": self.event_id,
            "event": self.event,
            "tenant": self.tenant,
            "job": self.job,
            "slot": iso(self.slot),
            "status": self.status,
            "attempts": self.attempts,
            "next_attempt_at": iso(self.next_attempt_at)
            if self.status == DeliveryStatus.PENDING
            else None,
            "locked_by": self.locked_by,
            "last_error": self.last_error,
            "delivered_at": iso(self.delivered_at),
            "created_at": iso(self.created_at),
        }


async def _check_scope(fetch: Fetch, rule: AlertRule) -> None:
    async def exists(tenant: str | None, job: str | None) -> bool:
        rows = await fetch("alert_scope_exists", {"tenant_id": tenant, "job_name": job})
        return bool(rows and rows[0]["found"])

    if rule.tenant is not None and not await exists(rule.tenant, None):
        raise InvalidInput("tenant", f"no job in tenant {rule.tenant!r}")
    if rule.job is not None and not await exists(rule.tenant, rule.job):
        where = f" in tenant {rule.tenant!r}" if rule.tenant is not None else ""
        raise InvalidInput("job", f"no job named {rule.job!r}{where}")


def _rule(row: dict[str, Any]) -> AlertRule:
    return AlertRule(
        name=row["name"],
        url=row["url"],
        events=tuple(row["events"]),
        format=row["format"],
        secret_env=row["secret_env"],
        tenant=row["tenant_id"],
        job=row["job_name"],
        legacy_signature=row["legacy_signature"],
    )


class AlertStore:
    def __init__(self, side: SideConnection) -> None:
        self._side = side

    @classmethod
    @asynccontextmanager
    async def open(
        cls, settings: ClusterSettings, application_name: str = "pulse-admin"
    ) -> AsyncIterator[AlertStore]:
        store = cls(SideConnection(settings, application_name, statement_timeout_s=5.0))
        try:
            yield store
        finally:
            await store.close()

    async def close(self) -> None:
        await self._side.close()

    async def config_values(self) -> dict[str, str]:
        """The ``config`` table (``pulse alerts test`` sends through the egress guard)."""
        return {row["key"]: row["value"] for row in await self._side.fetch("config_rows")}

    # -- rules --------------------------------------------------------------------------

    async def add_rule(self, rule: AlertRule) -> AlertRule:
        """Store a validated rule; ``InvalidInput`` for a taken name or a scope with no job."""
        params = {
            "name": rule.name,
            "url": rule.url,
            "events": list(rule.events),
            "format": rule.format,
            "secret_env": rule.secret_env,
            "tenant_id": rule.tenant,
            "job_name": rule.job,
            "legacy_signature": rule.legacy_signature,
        }
        async with self._side.transaction("alert_rule_insert") as fetch:
            await _check_scope(fetch, rule)
            if not await fetch("alert_rule_insert", params):
                raise InvalidInput("name", f"an alert rule named {rule.name!r} already exists")
        return rule

    async def rules(self) -> list[AlertRule]:
        return [_rule(row) for row in await self._side.fetch("alert_rules_list", {})]

    async def rule(self, name: str) -> AlertRule:
        rows = await self._side.fetch("alert_rule_get", {"name": name})
        if not rows:
            raise NotFound(f"no alert rule named {name!r}")
        return _rule(rows[0])

    async def remove_rule(self, name: str) -> None:
        if not await self._side.fetch("alert_rule_remove", {"name": name}):
            raise NotFound(f"no alert rule named {name!r}")

    async def deliveries(self, status: str | None = None, limit: int = 50) -> list[DeliveryRow]:
        """Deliveries, newest first."""
        if status is not None and status not in DELIVERY_STATUSES:
            raise InvalidInput("status", f"{status!r}: use {', '.join(DELIVERY_STATUSES)}")
        rows = await self._side.fetch("alert_deliveries_list", {"status": status, "limit": limit})
        return [
            DeliveryRow(
                id=r["id"],
                rule=r["rule_name"],
                status=r["status"],
                attempts=r["attempts"],
                next_attempt_at=r["next_attempt_at"],
                locked_by=r["locked_by"],
                last_error=r["last_error"],
                delivered_at=r["delivered_at"],
                created_at=r["created_at"],
                event_id=str(r["event_id"]),
                event=r["event"],
                tenant=r["tenant_id"],
                job=r["job_name"],
                slot=r["slot"],
            )
            for r in rows
        ]

    # -- the outbox (node) -----------------------------------------------------------------

    async def claim(
        self, node_id: str, limit: int, lease_s: float, now: datetime | None = None
    ) -> list[Delivery]:
        """Lease due deliveries: at most one per (rule, job), the oldest."""
        params = {"node_id": node_id, "limit": limit, "lease_s": lease_s, "now": now}
        return [
            Delivery(
                id=r["delivery_id"],
                attempts=r["attempts"],
                rule=r["rule_name"],
                url=r["url"],
                format=r["format"],
                secret_env=r["secret_env"],
                legacy_signature=r["legacy_signature"],
                db_now=r["db_now"],
                event=AlertEvent.from_row(r),
            )
            for r in await self._side.fetch("claim_deliveries", params)
        ]

    async def delivered(self, d: Delivery, node_id: str, now: datetime | None = None) -> bool:
        """Mark a leased delivery delivered; False if the lease was lost meanwhile."""
        params = {"id": d.id, "node_id": node_id, "attempts": d.attempts, "now": now}
        return bool(await self._side.fetch("delivery_delivered", params))

    async def retry(
        self,
        d: Delivery,
        node_id: str,
        *,
        delay_s: float,
        max_age_s: float,
        error: str,
        now: datetime | None = None,
    ) -> str | None:
        """Due again after ``delay_s``, or ``failed`` past ``max_age_s`` after the event;
        the status written, or None if the lease was lost meanwhile."""
        params = {
            "id": d.id,
            "node_id": node_id,
            "attempts": d.attempts,
            "delay_s": delay_s,
            "max_age_s": max_age_s,
            "error": error,
            "now": now,
        }
        rows = await self._side.fetch("delivery_retry", params)
        return str(rows[0]["status"]) if rows else None

    async def late_pass(self, shards: int, now: datetime | None = None) -> list[dict[str, Any]]:
        """Mark every slot that is late (in all ``shards``) once, raising its ``late`` event;
        returns the slots marked."""
        return await self._side.fetch("late_pass", {"shards": shards, "now": now})

    async def late_pass_all(
        self, shards: int, baseline_runs: int, now: datetime | None = None
    ) -> LateFound:
        """The late pass of a node in one transaction: ``late_pass``, ``watch_pass``,
        ``watch_timeouts`` and ``expect_runs``, which run on the same beat on the same
        connection (docs/design/beat.md). Each is idempotent, so a failure of one rolls the
        others back for the next pass to do again."""
        async with self._side.transaction("late pass") as fetch:
            late = await fetch("late_pass", {"shards": shards, "now": now})
            missed = await watches.watch_pass(fetch, shards, now)
            timed_out = await watches.watch_timeouts(fetch, now)
            params = {"baseline_runs": baseline_runs, "now": now}
            runs = await fetch("expect_runs", params)
        return LateFound(late, missed, timed_out, runs)

    async def expect_runs(self, baseline_runs: int, now: datetime | None = None) -> list[Row]:
        """The runs going on of jobs with a time expectation (``expect_runs``)."""
        params = {"baseline_runs": baseline_runs, "now": now}
        return await self._side.fetch("expect_runs", params)

    async def expect_mark(
        self, marks: Sequence[ExpectMark], now: datetime | None = None
    ) -> list[Row]:
        """Raise each event for its run once (``expect_mark``); returns those raised now."""
        rows = [
            (m.job_id.hex, m.slot.isoformat(), m.token, m.event, m.detail, m.flight) for m in marks
        ]
        return await self._side.fetch("expect_mark", {"marks": json.dumps(rows), "now": now})

    async def watch_pass(self, shards: int, now: datetime | None = None) -> list[Job]:
        """Declare missed, once each, the awaited slots of watch jobs that had no ping in
        time, raising their ``late`` events (``cluster.store.housekeeping.watches.watch_pass``)."""
        async with self._side.transaction("watch pass") as fetch:
            return await watches.watch_pass(fetch, shards, now)

    async def watch_timeouts(self, now: datetime | None = None) -> list[watches.TimedOut]:
        """Record ``timed_out``, once each, the watched runs whose end ping did not come
        within their timeout, raising ``failed`` (``watches.watch_timeouts``)."""
        async with self._side.transaction("watch timeouts") as fetch:
            return await watches.watch_timeouts(fetch, now)
