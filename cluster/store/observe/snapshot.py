"""The rows behind ``pulse status``: shard holders, live lock sessions, runs in flight,
backlog, fire lag and outcomes, read in one connection. ``cluster.health.status`` turns them into
the health report."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg

from cluster.settings import ClusterSettings
from cluster.store.connect import Conn, Row, connection
from cluster.store.queries import query, store_error
from cluster.store.schema.migrate import stored_shard_count


@dataclass(frozen=True)
class Snapshot:
    shard_count: int
    holders: list[Row]  # shard, node_id
    sessions: set[str]  # node ids with a lock session
    in_flight: dict[str, int]  # node id -> runs
    backlog: Row  # db_now, due, oldest_s
    lag: Row  # samples, p50_s, p99_s
    outcomes: list[Row]  # status, runs
    paused: list[Row]  # tenant_id, name, pause_note, total
    pinned: list[Row] = field(default_factory=list)  # tenant_id, name, zones, paused
    done: int = 0  # one-off jobs done (migration 011)
    held: Row | None = None  # held, oldest, overdue: slots waiting for upstreams


async def _rows(conn: Conn, name: str, params: dict[str, Any]) -> list[Row]:
    cur = await conn.execute(query(name), params)
    return await cur.fetchall()


async def read_snapshot(
    settings: ClusterSettings,
    node_ids: Sequence[str],
    *,
    horizon_s: float,
    lag_window_s: float,
    outcome_window_s: float,
    paused_limit: int,
    now: datetime | None = None,
) -> Snapshot:
    """The cluster tables, read over one connection; ``StoreError`` if it cannot be made."""
    windows = {"now": now, "horizon_s": horizon_s}
    try:
        async with connection(settings, "pulse-status") as conn:
            shard_count = await stored_shard_count(conn)
            holders = await _rows(conn, "shard_holders", {"ns": settings.lock_namespace})
            sessions = await _rows(conn, "live_sessions", {"ids": list(node_ids)})
            in_flight = await _rows(conn, "status_in_flight", {})
            backlog = await _rows(conn, "status_backlog", {"now": now})
            lag = await _rows(conn, "status_fire_lag", {**windows, "window_s": lag_window_s})
            outcomes = await _rows(
                conn, "status_outcomes", {**windows, "window_s": outcome_window_s}
            )
            paused = await _rows(conn, "status_paused", {"limit": paused_limit})
            pinned = await _rows(conn, "status_pinned", {})
            done = await _rows(conn, "status_done", {})
            held = await _rows(conn, "status_held", {"now": now})
    except psycopg.Error as exc:
        raise store_error(exc, "cannot read the cluster state") from exc
    return Snapshot(
        shard_count=shard_count,
        holders=holders,
        sessions={r["node_id"] for r in sessions},
        in_flight={r["node_id"]: r["runs"] for r in in_flight},
        backlog=backlog[0],
        lag=lag[0],
        outcomes=outcomes,
        paused=paused,
        pinned=pinned,
        done=done[0]["done"],
        held=held[0],
    )
