"""``pulse tenants ...``: limits of concurrent runs per tenant, enforced across the cluster
by the claim, and quotas on what a tenant may ask for, enforced by the database on every
write (docs/jobs.md, docs/design/fairness.md). ``pulse limits ...``: named limits the jobs
that name them share (docs/limits.md, docs/design/limits.md), enforced by the claim too.
Every change writes its audit row."""

from __future__ import annotations

import click

from cluster.cli import audited
from cluster.cli.base import PulseGroup, emit_json, with_store
from cluster.cli.table import table
from cluster.errors import InvalidInput
from cluster.jobs.models import iso
from cluster.store.jobstore.store import JobStore
from cluster.timing.durations import parse_duration


@click.group(cls=PulseGroup)
def tenants() -> None:
    """Limit how many runs of a tenant run at once, and what a tenant may ask for."""


@tenants.command("set")
@click.argument("tenant")
@click.option(
    "--max-concurrent", type=int, required=True, help="Runs of the tenant at once, cluster-wide."
)
@with_store
async def set_limit(store: JobStore, tenant: str, max_concurrent: int) -> None:
    """Run at most --max-concurrent of TENANT's slots at once across the cluster."""
    async with store.transaction():
        limit = await store.tenants.set_limit(tenant, max_concurrent)
        detail = f"max_concurrent {limit.max_concurrent}"
        await audited.record(store, "set limit", tenant=limit.tenant, detail=detail)
    click.echo(
        f"tenant {limit.tenant}: at most {limit.max_concurrent} at once ({limit.running} running)"
    )


@tenants.command("clear")
@click.argument("tenant")
@with_store
async def clear_limit(store: JobStore, tenant: str) -> None:
    """Lift TENANT's limit."""
    async with store.transaction():
        await store.tenants.clear_limit(tenant)
        await audited.record(store, "clear limit", tenant=tenant)
    click.echo(f"tenant {tenant}: no limit")


@tenants.command("list")
@click.option("--json", "as_json", is_flag=True)
@with_store
async def list_limits(store: JobStore, as_json: bool) -> None:
    """List the tenants' limits with the runs in flight of each."""
    found = await store.tenants.limits()
    if as_json:
        emit_json([x.to_json() for x in found])
        return
    if not found:
        click.echo("no tenant limits")
        return
    rows = [
        [x.tenant, str(x.max_concurrent), str(x.running), iso(x.updated_at) or ""] for x in found
    ]
    table([["TENANT", "MAX CONCURRENT", "RUNNING", "UPDATED"], *rows])


def _cap(field: str, text: str | None) -> int | None:
    """A cap as given on the command line: a whole number, or ``none`` to lift it."""
    if text is None or text.strip().lower() == "none":
        return None
    try:
        return int(text)
    except ValueError:
        raise InvalidInput(field, f"must be a whole number or none, got {text!r}") from None


def _seconds(field: str, text: str) -> int | None:
    """A duration cap as given on the command line (``5m``), in whole seconds, or ``none``."""
    if text.strip().lower() == "none":
        return None
    return max(1, round(parse_duration(text, field)))


_CAP_HELP = "a whole number, or none to lift it"


@tenants.command("quota")
@click.argument("tenant")
@click.option("--max-jobs", default=None, help=f"Jobs the tenant may have ({_CAP_HELP}).")
@click.option(
    "--max-backfill-slots",
    default=None,
    help=f"Backfill slots requested and not yet run ({_CAP_HELP}).",
)
@click.option(
    "--max-parallel",
    default=None,
    help=f"Slots one job (overlap allow) or backfill may run at once ({_CAP_HELP}).",
)
@click.option(
    "--min-period",
    default=None,
    help="Shortest time between two slots of a job, as 5m (none to lift it).",
)
@click.option(
    "--max-output-limit",
    default=None,
    help=f"Bytes of output a run may keep (a job's output_limit; {_CAP_HELP}).",
)
@click.option(
    "--max-keep-for",
    default=None,
    help="Longest a job may keep its runs (keep_for), as 90d (none to lift it).",
)
@click.option(
    "--max-keep-runs", default=None, help=f"Runs a job may keep (keep_runs; {_CAP_HELP})."
)
@click.option("--clear", is_flag=True, help="Lift every cap of TENANT.")
@with_store
async def quota(
    store: JobStore,
    tenant: str,
    max_jobs: str | None,
    max_backfill_slots: str | None,
    max_parallel: str | None,
    min_period: str | None,
    max_output_limit: str | None,
    max_keep_for: str | None,
    max_keep_runs: str | None,
    clear: bool,
) -> None:
    """Cap what TENANT may ask for from now on (what it has stays); only the caps given
    change."""
    given = {
        "max_jobs": max_jobs,
        "max_backfill_slots": max_backfill_slots,
        "max_parallel": max_parallel,
        "max_output_limit": max_output_limit,
        "max_keep_runs": max_keep_runs,
    }
    changes = {k: _cap(k, v) for k, v in given.items() if v is not None}
    durations = {"min_period_s": min_period, "max_keep_for_s": max_keep_for}
    changes |= {k: _seconds(k, v) for k, v in durations.items() if v is not None}
    if clear:
        if changes:
            raise InvalidInput("clear", "give either --clear or caps, not both")
        async with store.transaction():
            await store.quotas.clear(tenant)
            await audited.record(store, "clear quota", tenant=tenant)
        click.echo(f"tenant {tenant}: no quota")
        return
    async with store.transaction():
        found = await store.quotas.set(tenant, changes)
        detail = found.describe() if found is not None else "no cap"
        await audited.record(store, "set quota", tenant=tenant, detail=detail)
    click.echo(f"tenant {tenant}: {detail}")


@tenants.command("quotas")
@click.option("--json", "as_json", is_flag=True)
@with_store
async def list_quotas(store: JobStore, as_json: bool) -> None:
    """List the tenants' quotas with the jobs each has."""
    found = await store.quotas.quotas()
    if as_json:
        emit_json([x.to_json() for x in found])
        return
    if not found:
        click.echo("no tenant quotas")
        return

    def cap(value: int | None) -> str:
        return "-" if value is None else str(value)

    rows = [
        [
            x.tenant,
            cap(x.max_jobs),
            str(x.jobs),
            cap(x.max_backfill_slots),
            cap(x.max_parallel),
            iso(x.updated_at) or "",
        ]
        for x in found
    ]
    table([["TENANT", "MAX JOBS", "JOBS", "MAX BACKFILL SLOTS", "MAX PARALLEL", "UPDATED"], *rows])


# == pulse limits ==========================================================================

_TENANT_HELP = "A key of this tenant's own, which only its jobs can use [default: cluster-wide]."


@click.group(cls=PulseGroup)
def limits() -> None:
    """Limits shared by the jobs that name them (--uses): runs at once, starts per period."""


@limits.command("set")
@click.argument("key")
@click.option("--max-concurrent", type=int, default=None, help="Runs holding KEY at once.")
@click.option("--rate", default=None, help="Starts per period: N/s, N/min or N/h.")
@click.option("--tenant", default=None, help=_TENANT_HELP)
@with_store
async def set_key(
    store: JobStore, key: str, max_concurrent: int | None, rate: str | None, tenant: str | None
) -> None:
    """Create KEY, or give it exactly these limits (one of them, or both)."""
    async with store.transaction():
        found = await store.limits.set(key, tenant=tenant, max_concurrent=max_concurrent, rate=rate)
        await audited.record(store, "set key", tenant=tenant, detail=f"{key}: {found.describe()}")
    click.echo(
        f"key {_shown(found.name, found.tenant)}: {found.describe()} ({found.running} running)"
    )


@limits.command("remove")
@click.argument("key")
@click.option("--tenant", default=None, help="The tenant's own key [default: cluster-wide].")
@with_store
async def remove_key(store: JobStore, key: str, tenant: str | None) -> None:
    """Remove KEY; refused while a job uses it."""
    async with store.transaction():
        await store.limits.remove(key, tenant)
        await audited.record(store, "remove key", tenant=tenant, detail=key)
    click.echo(f"key {_shown(key, tenant)}: removed")


@limits.command("list")
@click.option("--json", "as_json", is_flag=True)
@click.option("--tenant", default=None, help="The cluster-wide keys and this tenant's own.")
@with_store
async def list_keys(store: JobStore, as_json: bool, tenant: str | None) -> None:
    """List the keys with their limits, the runs holding each and the slots waiting."""
    found = await store.limits.keys(tenant)
    if as_json:
        emit_json([x.to_json() for x in found])
        return
    if not found:
        click.echo("no limit keys")
        return
    rows = []
    for x in found:
        holders = ", ".join(
            f"{h['tenant']}/{h['job']} {h['slot']} on {h['node']}" for h in x.holders
        )
        waiters = ", ".join(f"{w['tenant']}/{w['job']}" for w in x.waiters)
        rows.append(
            [
                x.name,
                x.tenant or "*",
                "" if x.max_concurrent is None else str(x.max_concurrent),
                "" if x.rate is None else str(x.rate),
                str(x.running),
                holders or "-",
                waiters or "-",
            ]
        )
    table([["KEY", "TENANT", "MAX CONCURRENT", "RATE", "RUNNING", "HOLDERS", "WAITING"], *rows])


def _shown(key: str, tenant: str | None) -> str:
    return key if tenant is None else f"{key} (tenant {tenant})"
