"""``python -m bench.idle [--seconds N] [--by-statement]``: what an idle cluster costs, the
part of every steady fire's node CPU that is paid whether anything fires or not.

Three nodes (zones a, b, c, default settings) run on a throwaway database without jobs;
after they hold their shards, the window counts the database's transactions (every
statement a node runs outside a transaction block is one: ``pg_stat_database``), the
transactions the nodes say they sent (their ``pulse_db_transactions_total`` metric,
cluster/store/tally.py) and the nodes' CPU seconds. The database's figure also moves with
what the rest of the server does (other databases' catalog changes make idle backends
commit transactions of their own), so it is an upper bound; the nodes' own figure is exact.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

import psycopg

from bench.database import BenchDatabase, clear_redis, init_schema
from bench.fleet import Fleet
from bench.sampler import cpu_seconds
from cluster.local.processes import free_port

NODES = (("pulse-1", "a"), ("pulse-2", "b"), ("pulse-3", "c"))
SETTLE_S = 20.0
XACTS = "SELECT xact_commit + xact_rollback AS n FROM pg_stat_database WHERE datname = %(d)s"
_SENT = re.compile(
    r'^pulse_db_transactions_total\{connection="([^"]*)",statement="([^"]*)"\} (\S+)$', re.M
)


def _cpu(fleet: Fleet) -> float:
    return sum(cpu_seconds(pid) or 0.0 for pid in fleet.pids())


async def _xacts(db: BenchDatabase) -> int:
    async with await psycopg.AsyncConnection.connect(db.admin_url, autocommit=True) as conn:
        cur = await conn.execute(XACTS, {"d": db.name})
        row = await cur.fetchone()
    return int(row[0]) if row else 0


def _sent(ports: list[int]) -> Counter[tuple[str, str]]:
    """The nodes' tallies, summed: (connection, statement) -> transactions."""
    total: Counter[tuple[str, str]] = Counter()
    for port in ports:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
            text = answer.read().decode()
        for connection, statement, n in _SENT.findall(text):
            total[(connection, statement)] += int(float(n))
    return total


async def measure(seconds: float) -> tuple[float, float, float, dict[tuple[str, str], float]]:
    """Per node per second over ``seconds``: the database's transactions, the transactions
    the nodes sent, CPU milliseconds, and the nodes' by (connection, statement)."""
    db = BenchDatabase.new()
    await db.create()
    try:
        settings = db.cluster("pulse", db.name)  # Redis keys of this run alone
        await init_schema(settings, 256)
        with tempfile.TemporaryDirectory(prefix="pulse-idle-") as work:
            fleet = Fleet(settings, Path(work), Path(work) / "witness", "idle")
            ports = [free_port() for _ in NODES]
            try:
                for (node_id, zone), port in zip(NODES, ports, strict=True):
                    fleet.start_node(node_id, zone, 100, metrics_port=port)
                await asyncio.sleep(SETTLE_S)  # a fixed warm-up, not a synchronisation
                sent = await asyncio.to_thread(_sent, ports)
                xacts, cpu, started = await _xacts(db), _cpu(fleet), time.monotonic()
                await asyncio.sleep(seconds)
                xacts = await _xacts(db) - xacts - 1  # this reading's own
                cpu, elapsed = _cpu(fleet) - cpu, time.monotonic() - started
                by = await asyncio.to_thread(_sent, ports)
                by.subtract(sent)
            finally:
                fleet.stop_all()
                await clear_redis(settings)
    finally:
        await db.drop()
    per = len(NODES) * elapsed
    return xacts / per, by.total() / per, cpu * 1000 / per, {k: n / per for k, n in by.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.idle", description=__doc__)
    parser.add_argument("--seconds", type=float, default=60.0, help="the window [default 60]")
    parser.add_argument(
        "--by-statement", action="store_true", help="also list the nodes' transactions by statement"
    )
    args = parser.parse_args(argv)
    xacts, sent, cpu_ms, by = asyncio.run(measure(args.seconds))
    print(
        f"idle node: {xacts:.2f} transactions/s in the database, {sent:.2f} sent by the node, "
        f"{cpu_ms:.2f} ms CPU/s (3 nodes, no jobs)"
    )
    if args.by_statement:
        for (connection, statement), rate in sorted(by.items(), key=lambda kv: -kv[1]):
            if rate > 0:
                print(f"  {rate:5.2f}/s  {connection:7s} {statement}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
