"""The chaos ledger: a user table that ``pulse chaos``'s effect jobs write through
``ctx.transaction()``, one row per run, and the harness reads back to check that each slot's
effect committed exactly once (``cluster.chaos.verdict.kinds``).

It lives in the cluster's schema, so it goes with it (``--external`` runs drop their
schema), and handler transactions find it by its bare name: their connections have the
cluster's schema first on their ``search_path``. Diagnostic, like ``diagnostics``: the
nodes never touch it but through the handler.
"""

from __future__ import annotations

from typing import Any

from cluster.settings import ClusterSettings
from cluster.store.connect import connect

TABLE = "chaos_ledger"

CREATE = b"""
CREATE TABLE IF NOT EXISTS chaos_ledger (
    job text NOT NULL,
    slot timestamptz NOT NULL,
    attempt int NOT NULL,
    token bigint NOT NULL,
    node text NOT NULL
)
"""

# What the handler runs in its run's transaction (params: job, slot, attempt, token, node).
INSERT = "INSERT INTO chaos_ledger (job, slot, attempt, token, node) VALUES (%s, %s, %s, %s, %s)"

READ = b"SELECT job, slot, attempt, token, node FROM chaos_ledger"


async def create(settings: ClusterSettings, app: str) -> None:
    conn = await connect(settings, app, statement_timeout_s=30)
    try:
        await conn.execute(CREATE)
    finally:
        await conn.close()


async def rows(settings: ClusterSettings, app: str) -> list[dict[str, Any]]:
    """Every ledger row: job, slot, attempt, token, node."""
    conn = await connect(settings, app, statement_timeout_s=60)
    try:
        cur = await conn.execute(READ)
        return await cur.fetchall()
    finally:
        await conn.close()
