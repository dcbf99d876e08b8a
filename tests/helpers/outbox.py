"""Helpers of the alert tests: rules, runs driven through the node's own policy, and what
the outbox (alert_events, alert_deliveries) holds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from cluster.alerts.rules import AlertRule
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.connect import connect
from cluster.store.housekeeping.alerts import AlertStore
from cluster.store.lock.records import ClaimedJob
from cluster.store.lock.session import LockSession
from node.handlers.context import Outcome
from node.pipeline.outcomes import after_run, plan_at_claim

T0 = datetime(2026, 1, 1, tzinfo=UTC)
ALL = list(range(16))
HANDLER = "cluster.chaos.witness:record"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def every_10s(name: str, **kw: Any) -> JobSpec:
    return JobSpec.build(name, "@every 10s", HANDLER, **kw)


async def add_rule(settings: ClusterSettings, name: str, url: str, **kw: Any) -> AlertRule:
    async with AlertStore.open(settings) as alerts:
        return await alerts.add_rule(AlertRule.build(name, url, **kw))


async def sql(settings: ClusterSettings, statement: str, params: Any = None) -> list[Any]:
    conn = await connect(settings, "observer")
    try:
        cur = await conn.execute(statement.encode(), params)
        return await cur.fetchall() if cur.description is not None else []
    finally:
        await conn.close()


async def events(settings: ClusterSettings) -> list[dict[str, Any]]:
    """Every event in delivery order, once per rule that gets it."""
    return await sql(
        settings,
        "SELECT d.id AS delivery, d.rule_name AS rule, d.status, d.attempts, e.* "
        "FROM alert_deliveries d JOIN alert_events e ON e.id = d.event_id ORDER BY d.id",
    )


async def names(settings: ClusterSettings) -> list[tuple[str, str]]:
    """(event, job) of every delivery, in order."""
    return [(e["event"], e["job_name"]) for e in await events(settings)]


def outcome(status: str = "succeeded", error: str | None = None) -> Outcome:
    return Outcome(status, error if status != "succeeded" else None, 0.01)


async def run_slot(
    session: LockSession, now: datetime, status: str = "succeeded", error: str | None = "boom"
) -> list[ClaimedJob]:
    """Claim every job due at ``now`` and complete each as the node would: the catch-up
    plan at claim, else a run that ended with ``status``."""
    claimed = (await session.claim(ALL, 50, 30.0, now=now)).jobs
    assert claimed, f"nothing due at {now}"
    for job in claimed:
        done, skips = plan_at_claim(job, now) or after_run(job, outcome(status, error), now)
        assert await session.completions.complete([done], skips, now=now) == {job.id}
    return claimed
