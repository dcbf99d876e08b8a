"""``python -m bench.firecost [--rounds N]``: the Postgres CPU of a fire's two statements,
without nodes, membership or maintenance around them.

1,000 jobs ``@every 5s`` in 256 shards; one connection claims up to 200 due jobs of every
shard with the node's ``claim`` statement (not fair, the node's prepared form), another
completes each batch as succeeded with ``complete``, explicit ``now`` one period later per
round. Reported: the CPU seconds (``/proc``) of each connection's backend per 1,000 fires,
so the server's own figures, whatever the client and the rest of the machine do.

``--keys N --key-limit M``: every job uses one of N named limits of M runs at once each
(docs/limits.md), so a round takes several claims, each passing over the slots whose key
is full; without them no job has a key, as in a cluster that never set one.
"""

from __future__ import annotations

import argparse
import asyncio
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import AsyncCursor
from psycopg.rows import TupleRow, tuple_row

from bench.database import BenchDatabase, control, init_schema, load_jobs
from bench.sampler import cpu_seconds
from cluster.store.lock.records import Completion, claimed_jobs, complete_params
from cluster.store.lock.session import claim_params
from cluster.store.queries import query, variant

JOBS = 1000
LIMIT = 200
SHARDS = 256
EVERY_S = 5


async def measure(rounds: int, keys: int = 0, key_limit: int = 20) -> tuple[float, float, int]:
    """(claim, complete) backend CPU seconds per 1,000 fires, and the fires."""
    db = BenchDatabase.new()
    await db.create()
    try:
        settings = db.cluster("pulse", db.name)
        await init_schema(settings, SHARDS)
        conn = await control(settings)
        cur = await conn.execute("SELECT date_trunc('second', now()) - interval '1h' AS t")
        row = await cur.fetchone()
        assert row is not None
        t0 = row["t"]
        await load_jobs(conn, JOBS, f"@every {EVERY_S}s", SHARDS, t0)
        for k in range(keys):
            await conn.execute(
                "INSERT INTO limit_keys (name, max_concurrent) VALUES (%s, %s)",
                (f"key-{k}", key_limit),
            )
        if keys:
            await conn.execute(
                "UPDATE jobs j SET uses = ARRAY['key-' || (n.i %% %s)] FROM (SELECT id,"
                " row_number() OVER (ORDER BY name) AS i FROM jobs) AS n WHERE n.id = j.id",
                (keys,),
            )
            await conn.execute("VACUUM ANALYZE jobs")
        options = f"-c search_path={settings.schema},public -c jit=off"
        claimer, writer = [
            await psycopg.AsyncConnection.connect(
                settings.database_url, autocommit=True, prepare_threshold=0, options=options
            )
            for _ in range(2)
        ]
        claim, complete = variant("claim", "fair", False), query("complete")
        cpu = {"claim": 0.0, "complete": 0.0}
        fires = 0
        ccur, wcur = claimer.cursor(row_factory=tuple_row), writer.cursor(row_factory=tuple_row)

        async def timed(
            name: str, c: AsyncCursor[TupleRow], statement: bytes, params: dict[str, Any]
        ) -> list[TupleRow]:
            pid = c.connection.info.backend_pid
            before = cpu_seconds(pid) or 0.0
            await c.execute(statement, params)
            rows = await c.fetchall()
            cpu[name] += (cpu_seconds(pid) or 0.0) - before
            return rows

        for r in range(rounds):
            now = t0 + timedelta(seconds=EVERY_S * r)
            while True:
                params = claim_params(range(SHARDS), LIMIT, 60.0, "n1", "a", now)
                jobs = claimed_jobs(await timed("claim", ccur, claim, params), 3)
                if not jobs:
                    break
                step = timedelta(seconds=EVERY_S)
                done = [
                    Completion(
                        j.id,
                        j.lease_token,
                        j.slot,
                        "succeeded",
                        None,
                        0.001,
                        j.slot + step,
                        j.slot + step,
                        1,
                    )
                    for j in jobs
                ]
                params2 = complete_params(done, [], "n1", "a", now)
                applied = await timed("complete", wcur, complete, params2)
                assert len(applied) == len(done)
                fires += len(done)
        for c in (claimer, writer, conn):
            await c.close()
    finally:
        await db.drop()
    per = 1000 / max(fires, 1)
    return cpu["claim"] * per, cpu["complete"] * per, fires


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.firecost", description=__doc__)
    parser.add_argument("--rounds", type=int, default=12, help="periods fired [default 12]")
    parser.add_argument("--keys", type=int, default=0, help="named limits the jobs share")
    parser.add_argument("--key-limit", type=int, default=20, help="runs at once per key")
    args = parser.parse_args(argv)
    claim_s, complete_s, fires = asyncio.run(measure(args.rounds, args.keys, args.key_limit))
    print(
        f"{fires} fires: Postgres CPU per 1,000 fires: claim {claim_s:.3f} s, "
        f"complete {complete_s:.3f} s, both {claim_s + complete_s:.3f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
