"""``python -m bench.idle [--seconds N]``: what an idle cluster costs, the part of every
steady fire's node CPU that is paid whether anything fires or not.

Three nodes (zones a, b, c, default settings) run on a throwaway database without jobs;
after they hold their shards, the window counts the database's transactions (every
statement a node runs outside a transaction block is one: ``pg_stat_database``) and the
nodes' CPU seconds. The transactions include autovacuum's in that database, so they are an
upper bound of the nodes' statements that moves with what else the server runs.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import psycopg

from bench.database import BenchDatabase, clear_redis, init_schema
from bench.fleet import Fleet
from bench.sampler import cpu_seconds

NODES = (("pulse-1", "a"), ("pulse-2", "b"), ("pulse-3", "c"))
SETTLE_S = 20.0
XACTS = "SELECT xact_commit + xact_rollback AS n FROM pg_stat_database WHERE datname = %(d)s"


def _cpu(fleet: Fleet) -> float:
    return sum(cpu_seconds(pid) or 0.0 for pid in fleet.pids())


async def _xacts(db: BenchDatabase) -> int:
    async with await psycopg.AsyncConnection.connect(db.admin_url, autocommit=True) as conn:
        cur = await conn.execute(XACTS, {"d": db.name})
        row = await cur.fetchone()
    return int(row[0]) if row else 0


async def measure(seconds: float) -> tuple[float, float]:
    """(transactions, CPU milliseconds) per node per second over ``seconds``."""
    db = BenchDatabase.new()
    await db.create()
    try:
        settings = db.cluster("pulse", db.name)  # Redis keys of this run alone
        await init_schema(settings, 256)
        with tempfile.TemporaryDirectory(prefix="pulse-idle-") as work:
            fleet = Fleet(settings, Path(work), Path(work) / "witness", "idle")
            try:
                for node_id, zone in NODES:
                    fleet.start_node(node_id, zone, 100)
                await asyncio.sleep(SETTLE_S)  # a fixed warm-up, not a synchronisation
                xacts, cpu, started = await _xacts(db), _cpu(fleet), time.monotonic()
                await asyncio.sleep(seconds)
                xacts = await _xacts(db) - xacts - 1  # this reading's own
                cpu, elapsed = _cpu(fleet) - cpu, time.monotonic() - started
            finally:
                fleet.stop_all()
                await clear_redis(settings)
    finally:
        await db.drop()
    per = len(NODES) * elapsed
    return xacts / per, cpu * 1000 / per


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.idle", description=__doc__)
    parser.add_argument("--seconds", type=float, default=60.0, help="the window [default 60]")
    args = parser.parse_args(argv)
    xacts, cpu_ms = asyncio.run(measure(args.seconds))
    print(f"idle node: {xacts:.2f} transactions/s, {cpu_ms:.2f} ms CPU/s (3 nodes, no jobs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
