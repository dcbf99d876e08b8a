"""``pulse alerts ...``: alert rules, a test event, and the outbox's deliveries.

Webhook URLs often carry a token, so every command prints them redacted
(``cluster.alerts.rules.redact_url``); only a delivering node and ``alerts test`` use the full URL.
``alerts test`` sends through ``cluster.alerts.channels``, as a delivering node does.
"""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any, TypeVar

import click

from cluster.alerts.channels import MissingVariable, send
from cluster.alerts.mailer import SENT
from cluster.alerts.rules import EVENTS, FORMATS, AlertEvent, AlertRule
from cluster.alerts.webhook import Answer
from cluster.cli.base import PulseGroup, emit_json, fail, run, settings_of
from cluster.cli.table import table
from cluster.config.egress import EgressPolicy
from cluster.outbound.transport import fixed, guarded_client
from cluster.store.housekeeping.alerts import DELIVERY_STATUSES, AlertStore, DeliveryStatus

T = TypeVar("T")

TEST_DETAIL = "a test event sent by `pulse alerts test`"


def with_alerts(fn: Callable[..., Coroutine[Any, Any, T]]) -> Callable[..., T]:
    """Run ``fn(alert_store, **kwargs)`` against an admin connection of the cluster."""

    @functools.wraps(fn)
    @click.pass_context
    def wrapper(ctx: click.Context, /, **kwargs: Any) -> T:
        async def go() -> T:
            async with AlertStore.open(settings_of(ctx)) as store:
                return await fn(store, **kwargs)

        return run(go())

    return wrapper


@click.group(cls=PulseGroup)
def alerts() -> None:
    """Alert rules: who hears about failed, recovered, lost, late, skipped, paused, slow,
    overdue, too_fast, assertion_failed, double_run and incomplete."""


@alerts.command("add")
@click.argument("name")
@click.option(
    "--webhook",
    default=None,
    help="http:// or https:// URL to POST events to (pagerduty: the Events API by default).",
)
@click.option(
    "--secret-env",
    default=None,
    help="Sign bodies with the value of this environment variable, read on the nodes "
    "(pagerduty: the variable holding the routing key).",
)
@click.option(
    "--legacy-signature",
    is_flag=True,
    help="Also send X-Pulse-Signature (the body's HMAC alone, replayable) for receivers "
    "that verify nothing else yet.",
)
@click.option("--to", "to", multiple=True, help="email: a recipient (repeat, or a,b).")
@click.option("--format", "fmt", default="json", show_default=True, help=" | ".join(FORMATS))
@click.option(
    "--on", "events", default=",".join(EVENTS), show_default=True, help="Events, comma-separated."
)
@click.option("--tenant", default=None, help="Only jobs of this tenant.")
@click.option("--job", default=None, help="Only jobs of this name.")
@click.option("--json", "as_json", is_flag=True, help="Print the rule as JSON.")
@with_alerts
async def add_rule(
    store: AlertStore,
    name: str,
    webhook: str | None,
    secret_env: str | None,
    legacy_signature: bool,
    to: tuple[str, ...],
    fmt: str,
    events: str,
    tenant: str | None,
    job: str | None,
    as_json: bool,
) -> None:
    """Create an alert rule."""
    rule = AlertRule.build(
        name,
        webhook,
        events=events,
        format=fmt,
        secret_env=secret_env,
        tenant=tenant,
        job=job,
        to=to or None,
        legacy_signature=legacy_signature,
    )
    await store.add_rule(rule)
    if as_json:
        emit_json(rule.to_json())
    else:
        click.echo(f"created alert rule {rule.name}: {', '.join(rule.events)} -> {_where(rule)}")


def _scope(rule: AlertRule) -> str:
    if rule.job is not None:
        return f"job {rule.job}" + (f" (tenant {rule.tenant})" if rule.tenant else "")
    return f"tenant {rule.tenant}" if rule.tenant is not None else "every job"


def _where(rule: AlertRule) -> str:
    return f"{rule.target()} ({rule.format}) for {_scope(rule)}"


@alerts.command("list")
@click.option("--json", "as_json", is_flag=True)
@with_alerts
async def list_rules(store: AlertStore, as_json: bool) -> None:
    """List alert rules (webhook URLs redacted)."""
    found = await store.rules()
    if as_json:
        emit_json([rule.to_json() for rule in found])
        return
    if not found:
        click.echo("no alert rules")
        return
    header = ["NAME", "EVENTS", "SCOPE", "FORMAT", "SIGNED WITH", "WEBHOOK"]
    rows = [
        [
            r.name,
            ",".join(r.events),
            _scope(r),
            r.format,
            f"${r.secret_env}" if r.secret_env else "-",
            r.target(),
        ]
        for r in found
    ]
    table([header, *rows])


@alerts.command("remove")
@click.argument("name")
@with_alerts
async def remove_rule(store: AlertStore, name: str) -> None:
    """Remove an alert rule and its undelivered events."""
    await store.remove_rule(name)
    click.echo(f"removed alert rule {name}")


@alerts.command("test")
@click.argument("name")
@click.pass_context
def test_rule(ctx: click.Context, name: str) -> None:
    """Send a test event to the rule's webhook from this host; exit 1 unless it answers 2xx."""

    async def go() -> tuple[AlertRule, Answer]:
        async with AlertStore.open(settings_of(ctx)) as store:
            rule = await store.rule(name)
            config = await store.config_values()
        event = AlertEvent(
            id=str(uuid.uuid4()),
            event="test",
            tenant=rule.tenant or "*",
            job=rule.job or "*",
            slot=None,
            attempt=None,
            node=None,
            zone=None,
            error=None,
            detail=TEST_DETAIL,
            created_at=datetime.now(UTC),
        )
        async with guarded_client(fixed(EgressPolicy.from_config(config))) as client:
            try:
                answer = await send(client, rule, event, environ=os.environ, config=config)
            except MissingVariable as missing:
                answer = Answer(None, f"${missing.name} is not set on this host")
        return rule, answer

    rule, answer = run(go())
    target = rule.target()
    if not answer.ok:
        fail(f"test event to {target} not delivered: {answer.describe()}", 1)
    signed = (
        f", signed with ${rule.secret_env}"
        if rule.secret_env and rule.format != "pagerduty"
        else ""
    )
    click.echo(f"test event delivered to {target}{signed}: {_accepted(answer)}")


def _accepted(answer: Answer) -> str:
    return "accepted" if answer.status == SENT else answer.describe()


@alerts.command("deliveries")
@click.option("--status", default=None, help=" | ".join(DELIVERY_STATUSES))
@click.option("--limit", type=click.IntRange(1, 100_000), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@with_alerts
async def list_deliveries(store: AlertStore, status: str | None, limit: int, as_json: bool) -> None:
    """Deliveries of alert events, newest first."""
    found = await store.deliveries(status, limit)
    if as_json:
        emit_json([d.to_json() for d in found])
        return
    if not found:
        click.echo("no deliveries")
        return
    header = ["ID", "RULE", "EVENT", "TENANT", "JOB", "SLOT", "STATUS", "ATTEMPTS", "WHEN", "ERROR"]
    rows = []
    for d in found:
        when = d.delivered_at if d.status == DeliveryStatus.DELIVERED else d.next_attempt_at
        rows.append(
            [
                str(d.id),
                d.rule,
                d.event,
                d.tenant,
                d.job,
                d.slot.strftime("%Y-%m-%d %H:%M:%S") if d.slot else "-",
                d.status,
                str(d.attempts),
                when.strftime("%Y-%m-%d %H:%M:%S")
                if when and d.status != DeliveryStatus.FAILED
                else "-",
                (d.last_error or "")[:80],
            ]
        )
    table([header, *rows])
