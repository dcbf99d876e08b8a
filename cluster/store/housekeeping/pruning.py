"""Pruning: deleting the runs that passed their retention, alert events done with, the
revisions of jobs removed long enough ago, and chained jobs' slots taken long ago.

A pass walks the jobs that have runs a page at a time (by id, skipping through the runs
index, so jobs without runs cost nothing), keeps those of the given shards, and deletes
their expired runs in batches of at most ``BATCH`` rows (``prune_runs`` in sql/retention.sql).
Every statement is short and autocommit: a prune never holds locks for long, never
touches the job rows a claim locks, and shares with completions only the rare old run row
a retry rewrites. Nodes prune on a side connection of their own, ``<node id>/prune``;
``pulse runs prune`` on one it opens for the purpose, ``pulse-admin/prune``.
Why so: docs/design/retention.md.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from cluster.config.retention import MAX_KEEP_S, Retention
from cluster.settings import ClusterSettings
from cluster.store.connect import Row
from cluster.store.side import SideConnection

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
    revisions: int = 0  # of jobs removed longer ago than keep_failed_for (docs/retention.md)
    chain_slots: int = 0  # taken longer ago than keep_failed_for, their runs gone


@dataclass(frozen=True)
class TableSize:
    rows: float | None  # Postgres's estimate; None before the first vacuum or analyze
    bytes: int


async def _row(side: SideConnection, name: str, params: dict[str, Any]) -> Row:
    (row,) = await side.fetch(name, params)
    return row


def _after(job_id: UUID) -> UUID | None:
    """The smallest id after ``job_id``: where the next page starts (None: none can)."""
    return None if job_id == _LAST_ID else UUID(int=job_id.int + 1)


async def prune(
    side: SideConnection,
    retention: Retention,
    shards: Collection[int],
    *,
    now: datetime | None = None,
    dry_run: bool = False,
    page_jobs: int = PAGE_JOBS,
    batch: int = BATCH,
) -> PruneResult:
    """One pass over the jobs of ``shards``: delete (or with ``dry_run`` count) their
    expired runs, then the alert events done with."""
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
            row = await _row(side, "count_prunable_runs", params)
            result.runs += row["chosen"]
        else:
            row = await _row(side, "prune_runs", params)
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
        result.done_jobs = len(await side.fetch("prune_done_jobs", done))
    # Revisions, chain slots and events belong to no shard: every pass takes its share.
    events = {"now": now, "keep_s": retention.keep_failed_for_s, "batch": batch}
    result.statements += 1
    if dry_run:
        result.revisions = (await _row(side, "count_prunable_revisions", events))["chosen"]
    else:
        result.revisions = (await _row(side, "prune_revisions", events))["removed"]
    result.statements += 1
    if dry_run:
        result.chain_slots = (await _row(side, "count_prunable_chain_slots", events))["chosen"]
    else:
        result.chain_slots = (await _row(side, "prune_chain_slots", events))["removed"]
    if not dry_run:  # named limits' waits, kept as long as the runs they explain
        result.statements += 1
        await _row(side, "prune_limit_waits", events)
    while True:
        result.statements += 1
        if dry_run:
            row = await _row(side, "count_prunable_alert_events", events)
            result.alert_events += row["chosen"]
            return result
        gone = (await _row(side, "prune_alert_events", events))["removed"]
        result.alert_events += gone
        if gone < batch:
            return result


def side_connection(
    settings: ClusterSettings, application_name: str, *, statement_timeout_s: float
) -> SideConnection:
    """A pruning connection: never the lock session or the result writer, so a pass never
    waits behind a claim or a completion, nor they behind it (``prune_setup`` gives it its
    settings)."""
    return SideConnection(
        settings, application_name, statement_timeout_s=statement_timeout_s, setup="prune_setup"
    )


async def prune_held(
    side: SideConnection, shards: Collection[int], now: datetime | None = None
) -> tuple[PruneResult, TableSize]:
    """A node's pass: read the cluster's retention, prune ``shards``, then measure the runs
    table. A bad value in the config table is ``InvalidInput``, and nothing is pruned."""
    config = {row["key"]: row["value"] for row in await side.fetch("config_rows")}
    result = await prune(side, Retention.from_config(config), shards, now=now)
    size = await _row(side, "runs_table_size", {})
    return result, TableSize(size["rows"], int(size["bytes"]))
