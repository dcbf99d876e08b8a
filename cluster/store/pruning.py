"""Pruning: deleting the runs that passed their retention, and alert events done with.

A pass walks the jobs that have runs a page at a time (by id, skipping through the runs
index, so jobs without runs cost nothing), keeps those of the given shards, and deletes
their expired runs in batches of at most ``BATCH`` rows (``prune_runs`` in sql/retention.sql).
Every statement is short and autocommit: a prune never holds locks for long, never
touches the job rows a claim locks, and shares with completions only the rare old run row
a retry rewrites. Nodes prune on a connection of their own, ``<node id>/prune``
(``PruneConnection``); ``pulse runs prune`` on one it opens for the purpose.
Why so: docs/design/retention.md.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg

from cluster.config.retention import MAX_KEEP_S, Retention
from cluster.errors import StoreError
from cluster.settings import ClusterSettings
from cluster.store.config import read_config
from cluster.store.connect import Conn, connect, describe
from cluster.store.deadline import Deadline
from cluster.store.queries import query

PAGE_JOBS = 200  # jobs with runs per statement, of every shard; two probes per held one
BATCH = 500  # run rows deleted per statement at most
_FIRST_ID = UUID(int=0)
_LAST_ID = UUID(int=(1 << 128) - 1)


@dataclass
class PruneResult:
    """Rows a pass removed (or, in a dry run, would remove)."""

    runs: int = 0
    alert_events: int = 0
    statements: int = 0
    done_jobs: int = 0  # one-off jobs removed: done, and their runs gone or never wanted


@dataclass(frozen=True)
class TableSize:
    rows: float | None  # Postgres's estimate; None before the first vacuum or analyze
    bytes: int


async def _row(
    conn: Conn, name: str, params: dict[str, Any], deadline_s: float | None = None
) -> dict[str, Any]:
    try:
        if deadline_s is None:
            cur = await conn.execute(query(name), params)
            row = await cur.fetchone()
        else:
            async with Deadline(conn, deadline_s):
                cur = await conn.execute(query(name), params)
                row = await cur.fetchone()
    except psycopg.errors.UndefinedTable as exc:
        raise StoreError("the schema is not initialised; run `pulse init` first") from exc
    except psycopg.Error as exc:
        raise StoreError(f"{name}: {describe(exc)}") from exc
    assert row is not None
    return row


async def _count(conn: Conn, name: str, params: dict[str, Any], deadline_s: float | None) -> int:
    """How many rows the statement ``name`` returned."""
    try:
        async with contextlib.AsyncExitStack() as stack:
            if deadline_s is not None:
                await stack.enter_async_context(Deadline(conn, deadline_s))
            cur = await conn.execute(query(name), params)
            return len(await cur.fetchall())
    except psycopg.Error as exc:
        raise StoreError(f"{name}: {describe(exc)}") from exc


def _after(job_id: UUID) -> UUID | None:
    """The smallest id after ``job_id``: where the next page starts (None: none can)."""
    return None if job_id == _LAST_ID else UUID(int=job_id.int + 1)


async def prune(
    conn: Conn,
    retention: Retention,
    shards: Collection[int],
    *,
    now: datetime | None = None,
    dry_run: bool = False,
    page_jobs: int = PAGE_JOBS,
    batch: int = BATCH,
    deadline_s: float | None = None,
) -> PruneResult:
    """One pass over the jobs of ``shards``: delete (or with ``dry_run`` count) their
    expired runs, then the alert events done with. ``deadline_s`` bounds each statement
    (the connection is closed when it passes)."""
    result = PruneResult()
    params: dict[str, Any] = {
        "now": now,
        "shards": sorted(shards),
        "keep_for_s": retention.keep_for_s,
        "keep_failed_for_s": retention.keep_failed_for_s,
        "keep_runs": retention.keep_runs,
        "max_keep_s": MAX_KEEP_S,
        "jobs": page_jobs,
        "batch": batch,
    }
    start: UUID | None = _FIRST_ID if shards else None
    while start is not None:
        params["from_id"] = start
        result.statements += 1
        if dry_run:
            row = await _row(conn, "count_prunable_runs", params, deadline_s)
            result.runs += row["chosen"]
        else:
            row = await _row(conn, "prune_runs", params, deadline_s)
            result.runs += row["removed"]
            if row["chosen"] >= batch and row["removed"]:
                # A full batch: its last job may have more, the jobs before it are done.
                # (Rows chosen but rewritten meanwhile are left for the next pass.)
                start = row["resume_id"]
                continue
        start = None if row["last_id"] is None else _after(row["last_id"])
    if shards and not dry_run:  # done one-off jobs whose runs are gone (docs/time.md)
        result.statements += 1
        done = {"shards": sorted(shards), "batch": batch}
        result.done_jobs = await _count(conn, "prune_done_jobs", done, deadline_s)
    # Events belong to no shard: every pass takes its share, SKIP LOCKED.
    events = {"now": now, "keep_s": retention.keep_failed_for_s, "batch": batch}
    while True:
        result.statements += 1
        if dry_run:
            row = await _row(conn, "count_prunable_alert_events", events, deadline_s)
            result.alert_events += row["chosen"]
            return result
        gone = (await _row(conn, "prune_alert_events", events, deadline_s))["removed"]
        result.alert_events += gone
        if gone < batch:
            return result


async def setup(conn: Conn, deadline_s: float | None = None) -> None:
    """Give ``conn`` the settings of a pruning connection (``prune_setup``)."""
    await _row(conn, "prune_setup", {}, deadline_s)


async def table_size(conn: Conn, deadline_s: float | None = None) -> TableSize:
    row = await _row(conn, "runs_table_size", {}, deadline_s)
    return TableSize(row["rows"], int(row["bytes"]))


class PruneConnection:
    """A node's pruning connection, ``<node id>/prune``: opened on first use and again
    after any error, never the lock session or the result writer, so a pass never waits
    behind a claim or a completion, nor they behind it. Every statement has a deadline."""

    def __init__(
        self, settings: ClusterSettings, node_id: str, *, statement_timeout_s: float
    ) -> None:
        self._settings = settings
        self._name = f"{node_id}/prune"[:63]
        self._timeout_s = statement_timeout_s
        self._conn: Conn | None = None

    async def _open(self) -> Conn:
        if self._conn is None or self._conn.closed:
            conn = await asyncio.wait_for(
                connect(self._settings, self._name, statement_timeout_s=self._timeout_s),
                self._timeout_s + 1.0,
            )
            self._conn = conn
            await setup(conn, self._timeout_s + 1.0)
        return self._conn

    async def prune(
        self, shards: Collection[int], now: datetime | None = None
    ) -> tuple[PruneResult, TableSize]:
        """Read the cluster's retention, prune ``shards``, then measure the runs table.
        A bad value in the config table is ``InvalidInput``, and nothing is pruned."""
        deadline_s = self._timeout_s + 1.0
        try:
            conn = await self._open()
            async with Deadline(conn, deadline_s):
                retention = Retention.from_config(await read_config(conn))
            result = await prune(conn, retention, shards, now=now, deadline_s=deadline_s)
            size = await table_size(conn, deadline_s)
        except (TimeoutError, StoreError, psycopg.Error, OSError) as exc:
            await self.close()
            reason = "no answer in time" if isinstance(exc, TimeoutError) else str(exc)
            raise StoreError(f"prune: {reason}") from exc
        return result, size

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.closed:
            with contextlib.suppress(TimeoutError, psycopg.Error, OSError):
                await asyncio.wait_for(conn.close(), 2.0)
