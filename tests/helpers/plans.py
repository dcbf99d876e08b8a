"""Reading query plans (``EXPLAIN (FORMAT JSON)``): walk a plan's nodes, with or without
their parents; the plan of a named statement; how it reads ``jobs``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from cluster.store.connect import Conn
from cluster.store.queries import query

FILL = """
INSERT INTO jobs (id, name, schedule, handler, shard_id, next_run_at, slot_at)
SELECT gen_random_uuid(), 'bulk-' || g, '@every 5s', 'cluster.chaos.witness:record', g %% 256,
       %(t0)s, %(t0)s
FROM generate_series(1, %(n)s) AS g
"""


def walk(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from walk(child)


async def plan_of(conn: Conn, name: str, params: dict[str, Any]) -> dict[str, Any]:
    async with conn.transaction(force_rollback=True):
        cur = await conn.execute(b"EXPLAIN (FORMAT JSON) " + query(name), params)
        row = await cur.fetchone()
    assert row is not None
    plan: dict[str, Any] = row["QUERY PLAN"][0]["Plan"]
    return plan


def job_scans(plan: dict[str, Any]) -> list[tuple[str, str | None]]:
    """(scan, index) of every read of ``jobs``; a bitmap scan names its index below it."""
    found = []
    for n in walk(plan):
        if n.get("Relation Name") != "jobs" or "Scan" not in n["Node Type"]:
            continue
        index = n.get("Index Name")
        if n["Node Type"] == "Bitmap Heap Scan":
            index = next((c.get("Index Name") for c in walk(n) if c.get("Index Name")), None)
        found.append((n["Node Type"], index))
    return found


def walk_with_parents(
    node: dict[str, Any], parents: tuple[dict[str, Any], ...] = ()
) -> Iterator[Any]:
    yield node, parents
    for child in node.get("Plans", []):
        yield from walk_with_parents(child, (*parents, node))
