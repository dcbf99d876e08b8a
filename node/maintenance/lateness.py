"""The late pass: every node, every few seconds, marks the slots of ALL shards that were
not started within their job's ``late_after_s`` and raises a ``late`` alert for each; and
the runs still going of jobs with a time expectation (``--expect-max``, ``--deadline``,
``--expect-baseline``) that went past it, raising ``slow`` or ``overdue``.

It reads the database rather than this node's own claims, so a slot is reported late even
when the node that owns its shard is dead, as long as any node lives; ``late_slot`` on the
job row makes it once per slot however many nodes run the pass at the same time. A slot
that did start, but late, is reported by the completion of that attempt (the ``complete``
statement), so one claimed late and finished between two passes is not missed
(tests/integration/test_late.py). The marks of the expectation events (``expect_marks``)
make each once per run the same way (tests/integration/test_expectations.py); which are
due is decided here, from the rows of ``expect_runs``, because a deadline is wall-clock
time in the job's zone (``cluster.timing.deadlines``).

Watch jobs (never claimed: their runs come from pings) are read in their own shard by the
same pass: an awaited slot no ping came for within ``late_after_s`` is recorded failed and
raises ``late`` once, and the job awaits its next slot (cluster/store/housekeeping/watches.py,
tests/integration/test_watch.py); a run a ``/start`` opened whose end ping did not come
within its job's ``timeout`` is recorded ``timed_out`` and raises ``failed`` once
(tests/integration/test_watch_timeout.py).
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from cluster.errors import PulseError
from cluster.jobs.expectations import BASELINE_MIN_RUNS, BASELINE_RUNS
from cluster.store.housekeeping.alerts import AlertStore, ExpectMark
from cluster.timing.deadlines import deadline_after
from node.stats import Stats

logger = logging.getLogger(__name__)

INTERVAL_S = 5.0


def _deadline(row: dict[str, Any]) -> datetime | None:
    if row["deadline"] is None:
        return None
    try:
        return deadline_after(row["slot"], row["deadline"], row["tz"])
    except PulseError:  # a zone this node's tzdata lacks: the schedule could not run either
        return None


def due_event(row: dict[str, Any]) -> ExpectMark | None:
    """The first event the run of ``row`` (an ``expect_runs`` row) is due and has not had:
    ``overdue`` past its deadline, ``slow`` past its maximum or its baseline."""
    marks = set(row["marks"] or ())
    running_s: float = max(0.0, row["running_s"])
    found: tuple[str, str] | None = None
    deadline = _deadline(row)
    if "overdue" not in marks and deadline is not None and row["db_now"] >= deadline:
        found = ("overdue", f"still running at its {row['deadline']} deadline ({row['tz']})")
    elif "slow" not in marks:
        limit, p95 = row["expect_max_s"], row["p95_s"]
        if limit is not None and running_s > limit:
            found = ("slow", f"running for {running_s:.0f}s (expected at most {limit:g}s)")
        elif (
            row["expect_baseline"] is not None
            and p95 is not None
            and row["baseline_runs"] >= BASELINE_MIN_RUNS
            and running_s > row["expect_baseline"] * p95
        ):
            found = (
                "slow",
                f"running for {running_s:.0f}s, over {row['expect_baseline']:g}x the p95 "
                f"({p95:.3g}s) of its last {row['baseline_runs']} successful runs",
            )
    if found is None:
        return None
    event, detail = found
    return ExpectMark(row["id"], row["slot"], row["lease_token"], event, detail, row["flight"])


class LatePass:
    def __init__(self, store: AlertStore, shards: int, stats: Stats) -> None:
        self._store = store
        self._shards = shards
        self._stats = stats

    async def run_once(self, now: datetime | None = None) -> None:
        """One pass, its reads and marks in one transaction (``late_pass_all``)."""
        found = await self._store.late_pass_all(self._shards, BASELINE_RUNS, now)
        for row in found.late:
            self._stats.late_slots += 1
            logger.warning(
                "slot not started %.0fs after it was due",
                row["late_s"],
                extra={
                    "event": "slot_late",
                    "job": row["name"],
                    "tenant": row["tenant_id"],
                    "slot": row["slot_at"].isoformat(),
                },
            )
        for job in found.missed:
            self._stats.late_slots += 1
            logger.warning(
                "no ping for a watched slot within %.0fs",
                job.late_after_s,
                extra={
                    "event": "ping_missing",
                    "job": job.name,
                    "tenant": job.tenant,
                    "slot": job.slot_at.isoformat(),
                },
            )
        for run in found.timed_out:
            logger.warning(
                "no end ping for a watched run within its timeout",
                extra={
                    "event": "watch_run_timed_out",
                    "job": run.job_name,
                    "tenant": run.tenant,
                    "slot": run.slot.isoformat(),
                },
            )
        await self.expectations(now, found.expect_runs)

    async def expectations(
        self, now: datetime | None = None, runs: list[dict[str, Any]] | None = None
    ) -> None:
        """Raise ``slow`` and ``overdue`` for the runs going on that are due them (``runs``:
        the ``expect_runs`` rows, read now unless given)."""
        if runs is None:
            runs = await self._store.expect_runs(BASELINE_RUNS, now)
        marks = [m for m in map(due_event, runs) if m is not None]
        if not marks:
            return
        by_run = {(r["id"], r["slot"]): r for r in runs}
        for row in await self._store.expect_mark(marks, now):
            found = by_run.get((row["id"], row["slot"]), {})
            logger.warning(
                "run %s",
                row["event"],
                extra={
                    "event": f"run_{row['event']}",
                    "job": found.get("name"),
                    "tenant": found.get("tenant_id"),
                    "slot": row["slot"].isoformat(),
                },
            )
