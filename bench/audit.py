"""The audit scenario: ``pulse audit`` over a week of 1,000 jobs ``@every 1m`` (10,080,000
slots), against the least any audit does: streaming the same run rows through the same
server-side cursor without looking at them.

No node runs: the runs table is filled with ``generate_series`` in SQL, one succeeded run
per slot but for every 1,000th, left missing, and the jobs' revisions are dated to the
range's start, so every slot is expected. The ``pulse`` row is the audit as the CLI runs it
(``cluster.store.observe.audit.audit_lines``, every line counted); the ``baseline`` row
reads the rows alone. Both report wall time and the client's CPU per million slots
(``audit_s_per_million``, ``cpu_s_per_million``); the ratio is what the merge and the
classification cost on top of reading the rows.
"""

from __future__ import annotations

import time
from collections import Counter
from contextlib import aclosing
from datetime import timedelta

from psycopg.rows import tuple_row

from bench import database as db
from bench.results import Measure, ScenarioResult
from bench.trial import Bench, Trial
from cluster.store.connect import Conn, connect
from cluster.store.observe.audit import BATCH, Scope, audit_lines
from cluster.store.queries import query

NOTE = "the same run rows streamed through the same cursor, not classified"
MISSING_EVERY = 1000  # one slot in this many has no run row: the audit must find each

FILL = """
INSERT INTO runs (job_id, tenant_id, job_name, scheduled_for, attempt, node_id, zone, status,
                  lease_token, started_at, finished_at, duration_s)
SELECT j.id, j.tenant_id, j.name, s.t, 1, 'pulse-1', 'a', 'succeeded', s.n, s.t, s.t, 0.001
FROM jobs j
CROSS JOIN LATERAL (
    SELECT %(start)s::timestamptz + k * make_interval(secs => %(every)s) AS t, k AS n
    FROM generate_series(0, %(slots)s - 1) AS k
    WHERE (k + abs(hashtext(j.name))) %% %(missing)s <> 0
) AS s
"""


async def run_audit(bench: Bench, baselines: object) -> ScenarioResult:
    sizes = bench.sizes
    every = timedelta(seconds=sizes.audit_every_s)
    slots = int(sizes.audit_days * 86400 // sizes.audit_every_s)
    async with Trial(bench, "audit", "pulse") as trial:
        now = await db.db_now(trial.conn)
        start = now.replace(second=0, microsecond=0) - timedelta(days=sizes.audit_days + 1)
        end = start + slots * every
        await db.load_jobs(
            trial.conn, sizes.audit_jobs, f"@every {sizes.audit_every_s}s", sizes.shards, end
        )
        # The jobs existed before the range, and stand at its end.
        await trial.conn.execute("UPDATE job_revisions SET at = %s", (start - every,))
        params = {"start": start, "every": sizes.audit_every_s, "slots": slots,
                  "missing": MISSING_EVERY}  # fmt: skip
        await trial.conn.execute(FILL, params)
        # Every run written is kept: the audit judges each slot by its row, none `pruned`.
        await trial.conn.execute("UPDATE jobs SET keep_runs = %s", (slots,))
        await trial.conn.execute("VACUUM ANALYZE runs")
        expected = sizes.audit_jobs * slots
        scope = Scope(start, end, grace_s=0.0, now=end)
        pulse = await _timed("pulse", trial, scope, classify=True)
        baseline = await _timed("baseline", trial, scope, classify=False)
    for measure in (pulse, baseline):
        measure.expected = expected
    params = bench.sizes.params("audit_jobs", "audit_every_s", "audit_days")
    return ScenarioResult("audit", params, pulse, baseline, NOTE)


async def _timed(system: str, trial: Trial, scope: Scope, *, classify: bool) -> Measure:
    conn = await connect(trial.settings, "bench-audit")
    counted: Counter[str] = Counter()
    started, cpu = time.monotonic(), time.process_time()
    try:
        if classify:
            async with aclosing(audit_lines(conn, scope)) as lines:
                async for line in lines:
                    counted[line.verdict] += 1
        else:
            counted["rows"] = await _rows_only(conn, scope)
    finally:
        await conn.close()
    wall, cpu = time.monotonic() - started, time.process_time() - cpu
    count = sum(counted.values())
    per_million = 1e6 / max(count, 1)
    return Measure(
        system,
        fires=count,
        missing=counted.get("missing"),
        extra={
            "audit_s": round(wall, 2),
            "audit_s_per_million": round(wall * per_million, 3),
            "cpu_s_per_million": round(cpu * per_million, 3),
            "verdicts": dict(counted),
        },
    )


async def _rows_only(conn: Conn, scope: Scope) -> int:
    """The run rows of the audit's own statement, read and dropped."""
    found = await conn.execute(b"SELECT id FROM jobs ORDER BY tenant_id, name")
    ids = [row["id"] for row in await found.fetchall()]
    params = {"ids": ids, "start": scope.start, "end": scope.end, "scope": None}
    count = 0
    async with (
        conn.transaction(),
        conn.cursor(name="bench_rows", row_factory=tuple_row, binary=True) as cur,
    ):
        await cur.execute(query("audit_runs"), params)
        while batch := await cur.fetchmany(BATCH):
            count += len(batch)
    return count
