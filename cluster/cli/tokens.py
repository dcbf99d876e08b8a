"""``pulse tokens ...``: the HTTP API's tokens and its audit trail (``pulse tokens audit``).

Tokens are made here, on a host with the database's credentials, never through the API;
making and revoking one writes its audit row (``cluster.cli.audited``), never its secret.
"""

from __future__ import annotations

import click

from cluster.cli import audited
from cluster.cli.base import PulseGroup, emit_json, with_store
from cluster.cli.table import table
from cluster.jobs.fields import validate_name
from cluster.jobs.models import iso
from cluster.store.jobstore.store import JobStore
from cluster.timing.expiry import DEFAULT_EXPIRES, parse_expiry
from cluster.web.tokens import ROLES, new_token, token_hash


@click.group("tokens", cls=PulseGroup)
def tokens() -> None:
    """Create, list and revoke the tokens of the HTTP API (pulse web)."""


@tokens.command("create")
@click.argument("name")
@click.option(
    "--role",
    type=click.Choice(ROLES),
    required=True,
    envvar="PULSE_TOKEN_ROLE",
    help="read: read only; write: change jobs; admin: also read the audit trail.",
)
@click.option("--tenant", default=None, envvar="PULSE_TOKEN_TENANT", help="Only this tenant.")
@click.option(
    "--expires",
    default=DEFAULT_EXPIRES,
    show_default=True,
    envvar="PULSE_TOKEN_EXPIRES",
    help="A duration (30d), an ISO 8601 time (UTC without an offset) or never.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the token and its facts as JSON.")
@with_store
async def create(
    store: JobStore,
    name: str,
    role: str,
    tenant: str | None,
    expires: str,
    as_json: bool,
) -> None:
    """Create a token and print it once: only its hash is stored. It expires after 90
    days unless --expires says otherwise."""
    validate_name(name)
    if tenant is not None:
        validate_name(tenant, "tenant")
    expiry = parse_expiry(expires)
    secret = new_token()
    async with store.transaction():
        info = await store.access.create_token(
            name,
            role,
            token_hash(secret),
            tenant=tenant,
            expires_s=expiry.after_s,
            expires_at=expiry.at,
        )
        until = f", expires {iso(info.expires_at)}" if info.expires_at else ""
        detail = f"token {name}: role {role}{until}"
        await audited.record(store, "create token", tenant=tenant, detail=detail)
    if expiry.never:
        click.echo(f"pulse: warning: token {name} never expires; revoke it when done", err=True)
    if as_json:
        emit_json({**info.to_json(), "token": secret})
        return
    click.echo(secret)
    scope = f"tenant {tenant}" if tenant else "every tenant"
    until = f"until {iso(info.expires_at)}" if info.expires_at else "no expiry"
    click.echo(f"token {name}: role {role}, {scope}, {until}; shown once, keep it safe", err=True)


@tokens.command("list")
@click.option("--json", "as_json", is_flag=True)
@with_store
async def list_tokens(store: JobStore, as_json: bool) -> None:
    """List tokens (never their secrets)."""
    found = await store.access.tokens()
    if as_json:
        emit_json([t.to_json() for t in found])
        return
    if not found:
        click.echo("no tokens")
        return
    rows = [["NAME", "ROLE", "TENANT", "CREATED", "EXPIRES", "LAST USED", "REVOKED"]]
    for t in found:
        rows.append(
            [
                t.name,
                t.role,
                t.tenant or "*",
                iso(t.created_at) or "-",
                iso(t.expires_at) or "never",
                iso(t.last_used_at) or "-",
                iso(t.revoked_at) or "-",
            ]
        )
    table(rows)


@tokens.command("revoke")
@click.argument("name")
@with_store
async def revoke(store: JobStore, name: str) -> None:
    """Revoke a token: it stops working at once; it stays listed as revoked, and its name
    is never given again."""
    async with store.transaction():
        await store.access.revoke_token(name)
        await audited.record(store, "revoke token", detail=f"token {name}")
    click.echo(f"revoked {name}")


@tokens.command("audit")
@click.option("--tenant", default=None, envvar="PULSE_AUDIT_TENANT", help="Only this tenant.")
@click.option("--limit", type=click.IntRange(1, 100_000), default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@with_store
async def audit_trail(store: JobStore, tenant: str | None, limit: int, as_json: bool) -> None:
    """The changes made through the HTTP API and by pulse tokens, config and tenants,
    newest first."""
    found = await store.access.audit_entries(scope=tenant, limit=limit)
    if as_json:
        emit_json([e.to_json() for e in found])
        return
    if not found:
        click.echo("no audit entries")
        return
    rows = [["AT", "BY", "ACTION", "TENANT", "JOB", "SOURCE", "DETAIL"]]
    for e in found:
        rows.append(
            [
                iso(e.at) or "-",
                e.token,
                e.action,
                e.tenant or "-",
                e.job or "-",
                e.source or "-",
                e.detail or "-",
            ]
        )
    table(rows)
