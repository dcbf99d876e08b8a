"""A billing rollup whose usage rows are written exactly once: Pulse's recipe for effects
that live in Postgres.

Every hour, one tenant's API requests of the past hour are rolled up into one row of
``usage_rows`` (the invoice line). Pulse runs each slot at least once: a node that dies,
freezes or loses its network mid-run has its run taken over and run again. The recipe that
turns that into exactly one usage row per hour:

1. Keep the tables in Pulse's database, in ``public`` or any schema on its search path
   (``SCHEMA`` below creates this example's two)::

       python -c 'import examples.billing_rollup as b; print(b.SCHEMA)' | psql "$PULSE_DATABASE_URL"

2. Write the run's rows inside ``async with ctx.transaction() as conn:`` (sync handlers:
   ``with``), on the psycopg connection it gives, and do not commit: Pulse commits them
   together with the run's completion, and only if that completion passes its fence. A
   run whose lease was taken over (a zombie that wakes up) has its rows rolled back; so
   does a run that fails, times out or is cancelled, and its retry writes them again.
3. Optionally record ``ctx.fencing_token``: it grows with every claim of the job, so the
   row says which run wrote it (and a write to another system can be fenced by it).

No ``ON CONFLICT`` or unique key is needed for correctness: only the committed run's rows
exist. The rollup itself must read what it aggregates in the same transaction, as here.

    pulse jobs apply --module examples.billing_rollup   # or Node(..., sync_jobs=[jobs])

``tests/e2e/test_billing_example.py`` runs it through a real node and finds exactly one
usage row per slot, carrying the fencing token of that slot's run.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pulsecron import Registry, RunContext

SCHEMA = """
CREATE TABLE IF NOT EXISTS api_requests (
    tenant text NOT NULL,
    at timestamptz NOT NULL,
    path text NOT NULL
);
CREATE TABLE IF NOT EXISTS usage_rows (
    tenant text NOT NULL,
    period_start timestamptz NOT NULL,
    period_end timestamptz NOT NULL,
    requests bigint NOT NULL,
    amount_usd numeric(12, 4) NOT NULL,
    fencing_token bigint NOT NULL,
    written_by text NOT NULL
);
"""

ROLLUP = """
INSERT INTO usage_rows
    (tenant, period_start, period_end, requests, amount_usd, fencing_token, written_by)
SELECT %(tenant)s, %(start)s, %(end)s, count(*), count(*) / 1000.0 * %(price)s,
       %(token)s, %(node)s
FROM api_requests
WHERE tenant = %(tenant)s AND at >= %(start)s AND at < %(end)s
RETURNING requests
"""

jobs = Registry(tenant="acme")


@jobs.cron(
    "@hourly",
    name="usage-rollup",
    payload={"period_s": 3600, "price_per_1k": 0.012},
    catch_up="backfill",  # after an outage, every missed hour is rolled up, in order
    max_backfill=48,
    timeout="5m",
    retries=3,
)
async def usage_rollup(ctx: RunContext) -> dict[str, Any]:
    """Roll the tenant's requests of the hour before the slot into one usage row."""
    end = ctx.scheduled_for
    start = end - timedelta(seconds=float(ctx.payload.get("period_s", 3600)))
    params = {
        "tenant": ctx.tenant_id,
        "start": start,
        "end": end,
        "price": float(ctx.payload.get("price_per_1k", 0.012)),
        "token": ctx.fencing_token,
        "node": ctx.node_id,
    }
    async with ctx.transaction() as conn:
        cur = await conn.execute(ROLLUP, params)
        row = await cur.fetchone()
    requests = int(row["requests"]) if row else 0
    # Kept with the run (pulse runs show): what this attempt rolled up, if it commits.
    return {"period_start": start.isoformat(), "requests": requests}
