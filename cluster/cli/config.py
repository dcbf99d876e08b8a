"""``pulse config``: the cluster's run-time settings (retention, the API's allow-list, the
egress guard, Celery brokers), shown and set."""

from __future__ import annotations

from typing import Any

import click

from cluster.cli import audited
from cluster.cli.base import PulseGroup, emit_json, with_store
from cluster.cli.table import table
from cluster.config.keys import KEYS, audit_text, canonical, defaults
from cluster.config.retention import KEEP_RUNS
from cluster.jobs.models import iso
from cluster.store.jobstore.store import JobStore


@click.group("config", cls=PulseGroup)
def config() -> None:
    """Show and set the cluster's settings: keep_for, keep_runs, keep_failed_for, api.handlers,
    api.env, api.http_body, egress.allow, celery.brokers."""


@config.command("show")
@click.option("--json", "as_json", is_flag=True, help="Print {key: value} as JSON.")
@with_store
async def show(store: JobStore, as_json: bool) -> None:
    """Show every setting; one not stored shows its default."""
    stored = {key: (value, at) for key, value, at in await store.config()}
    default = defaults()
    keys = [*KEYS, *sorted(set(stored) - set(KEYS))]
    if as_json:
        found: dict[str, Any] = {}
        for key in keys:
            value = stored[key][0] if key in stored else default[key]
            found[key] = int(value) if key == KEEP_RUNS else value
        emit_json(found)
        return
    rows = [["KEY", "VALUE", "UPDATED"]]
    for key in keys:
        if key in stored:
            value, at = stored[key]
            rows.append([key, value, iso(at) or "-"])
        else:
            rows.append([key, default[key], "(default, not stored)"])
    table(rows)


# A VALUE such as -1d is a (bad) value, not an option.
@config.command("set", context_settings={"ignore_unknown_options": True})
@click.argument("key")
@click.argument("value")
@with_store
async def set_value(store: JobStore, key: str, value: str) -> None:
    """Set KEY to VALUE: keep_for and keep_failed_for take a duration (30d, 12h),
    keep_runs a whole number, api.handlers the handlers the HTTP API may use
    ('billing.jobs:rollup,shell:/opt/backup/run *,http:POST https://hooks.example.com/'),
    api.env the node variables its jobs may name ('BILLING_*'), api.http_body keep or
    drop, egress.allow the networks nodes may reach ('10.1.0.0/16,127.0.0.0/8'),
    celery.brokers names to broker URLs ('main=${env:CELERY_MAIN_URL}'). Nodes use
    retention from their next prune, the rest within seconds. The change is written to
    the audit trail (pulse tokens audit)."""
    canonical(key, value)  # bad input: one line naming the key, before anything is written
    async with store.transaction():
        stored = await store.set_config(key, value)
        await audited.record(store, "set config", detail=audit_text(key, stored))
    click.echo(f"{key} = {stored}")
