"""Handlers two tenants' registries offer to jobs written over the HTTP API, without jobs of
their own (``Registry.handler``); loaded by a node with ``--sync-jobs``."""

from __future__ import annotations

from pulsecron import Registry, RunContext

globex = Registry(tenant="globex")
acme = Registry(tenant="acme")


@globex.handler
def globex_report(ctx: RunContext) -> str:
    return f"globex {ctx.job_name}"


@acme.handler
def acme_report(ctx: RunContext) -> str:
    return f"acme {ctx.job_name}"
