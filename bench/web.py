"""``python -m bench.web [--jobs N] [--runs N] [--samples N]``: how long ``pulse web`` takes
to list one page of jobs and one page of runs from a large database, against the same
statements run directly on the same kind of connection, in the same run.

A throwaway database gets ``--jobs`` jobs over 10 tenants, next due within the second
hour from now (no node runs, so none comes due during the run: a healthy cluster has no
backlog), and ``--runs`` runs spread over the jobs, loaded with ``INSERT ... SELECT`` on the
server, then ``VACUUM ANALYZE``. One ``pulse web`` process serves them; each sample lists a
page through HTTP (token lookup, pool, JSON included) and then the same page through
``JobStore.pages`` on a dedicated connection (a page of jobs: the JSON text its statement
writes, as the API sends it). Target: p99 over HTTP within 2x of p99 direct.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from bench.database import BenchDatabase
from cluster.local.processes import Command, free_port, pulse_env
from cluster.settings import ClusterSettings
from cluster.store.connect import connect
from cluster.store.jobstore.store import JobStore
from cluster.web.tokens import new_token, token_hash

TENANTS = 10
SHARDS = 256
TARGET_RATIO = 2.0

LOAD_JOBS = """
INSERT INTO jobs (id, tenant_id, name, schedule, handler, shard_id, next_run_at, slot_at)
SELECT gen_random_uuid(), 'tenant-' || (i %% %(tenants)s), 'job-' || lpad(i::text, 8, '0'),
       '@every 1h', 'bench.jobs:run', i %% %(shards)s,
       now() + interval '1 hour' + (i %% 3600) * interval '1 second',
       now() + interval '1 hour' + (i %% 3600) * interval '1 second'
FROM generate_series(1, %(jobs)s) AS i
"""
LOAD_RUNS = """
INSERT INTO runs (job_id, tenant_id, job_name, scheduled_for, attempt, node_id, zone, status,
                  started_at, finished_at, duration_s)
SELECT j.id, j.tenant_id, j.name, s.at, 1, 'node-a', 'a',
       CASE WHEN k %% 50 = 0 THEN 'failed' ELSE 'succeeded' END, s.at, s.at, 0.01
FROM (SELECT id, tenant_id, name, row_number() OVER () AS n FROM jobs) AS j
CROSS JOIN generate_series(1, %(per_job)s) AS k
CROSS JOIN LATERAL (SELECT now() - (k * 3600 + j.n %% 3600) * interval '1 second' AS at) AS s
"""


async def load(settings: ClusterSettings, jobs: int, runs: int) -> None:
    async with JobStore.open(settings) as store:
        await store.init(SHARDS)
    conn = await connect(settings, "pulse-bench", statement_timeout_s=3600)
    try:
        params = {"tenants": TENANTS, "shards": SHARDS, "jobs": jobs}
        await conn.execute(LOAD_JOBS.encode(), params)
        await conn.execute(LOAD_RUNS.encode(), {"per_job": max(1, runs // jobs)})
        await conn.execute(b"VACUUM ANALYZE jobs")
        await conn.execute(b"VACUUM ANALYZE runs")
    finally:
        await conn.close()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def measure(
    settings: ClusterSettings, url: str, token: str, samples: int
) -> list[dict[str, Any]]:
    conn = await connect(settings, "pulse-bench-direct")
    store = JobStore(conn, settings)
    client = httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {token}"})
    middle = ("tenant-5", "job-" + "5".zfill(8))
    cases: list[tuple[str, str, dict[str, Any], Callable[[], Awaitable[object]]]] = [
        ("jobs, first page", "/api/jobs", {"limit": 100}, lambda: store.pages.jobs(limit=100)),
        (
            "jobs, one tenant, from a cursor",
            "/api/jobs",
            {"tenant": middle[0], "limit": 100, "cursor": _cursor(*middle)},
            lambda: store.pages.jobs(tenant=middle[0], after=middle, limit=100),
        ),
        ("runs, first page", "/api/runs", {"limit": 100}, lambda: store.pages.runs(limit=100)),
        (
            "runs of one job",
            "/api/runs",
            {"job": "job-00000005", "tenant": "tenant-5", "limit": 100},
            lambda: store.pages.runs(job="job-00000005", tenant="tenant-5", limit=100),
        ),
    ]
    results = []
    try:
        for label, path, params, direct in cases:
            web_s: list[float] = []
            sql_s: list[float] = []
            for i in range(samples + 5):  # the first five warm both paths up
                start = time.perf_counter()
                answer = await client.get(path, params=params)
                elapsed = time.perf_counter() - start
                answer.raise_for_status()
                start = time.perf_counter()
                await direct()
                direct_s = time.perf_counter() - start
                if i >= 5:
                    web_s.append(elapsed)
                    sql_s.append(direct_s)
            results.append(
                {
                    "case": label,
                    "web_p50_ms": statistics.median(web_s) * 1000,
                    "web_p99_ms": pct(web_s, 0.99) * 1000,
                    "sql_p50_ms": statistics.median(sql_s) * 1000,
                    "sql_p99_ms": pct(sql_s, 0.99) * 1000,
                }
            )
    finally:
        await client.aclose()
        await conn.close()
    return results


def _cursor(*parts: str) -> str:
    import base64
    import json

    text = json.dumps(list(parts), separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


async def make_token(settings: ClusterSettings) -> str:
    secret = new_token()
    async with JobStore.open(settings) as store:
        await store.access.create_token("bench", "read", token_hash(secret))
    return secret


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.web", description=__doc__)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5_000_000)
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args(argv)
    db = BenchDatabase.new()
    asyncio.run(db.create())
    print(f"database {db.name} (dropped at the end)")
    settings = db.cluster("pulse", "web")
    process = None
    try:
        started = time.monotonic()
        asyncio.run(load(settings, args.jobs, args.runs))
        print(f"loaded {args.jobs} jobs and {args.runs} runs in {time.monotonic() - started:.0f}s")
        token = asyncio.run(make_token(settings))
        port = free_port()
        argv_web = (sys.executable, "-m", "node", "--log-level", "WARNING", "web",
                    "--bind", f"127.0.0.1:{port}")  # fmt: skip
        process = Command(argv_web, pulse_env(settings)).start("web")
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/api/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.2)
        results = asyncio.run(measure(settings, url, token, args.samples))
    finally:
        if process is not None:
            process.stop(10)
        asyncio.run(db.drop())
    print(f"\n{args.jobs} jobs, {args.runs} runs, {args.samples} samples per case, pages of 100")
    print("| case | HTTP p50 | HTTP p99 | SQL p50 | SQL p99 | p99 ratio |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    worst = 0.0
    for r in results:
        ratio = r["web_p99_ms"] / r["sql_p99_ms"]
        worst = max(worst, ratio)
        print(
            f"| {r['case']} | {r['web_p50_ms']:.1f} ms | {r['web_p99_ms']:.1f} ms | "
            f"{r['sql_p50_ms']:.1f} ms | {r['sql_p99_ms']:.1f} ms | {ratio:.2f} |"
        )
    verdict = "met" if worst <= TARGET_RATIO else "missed"
    print(f"\ntarget p99 ratio <= {TARGET_RATIO}: {verdict} (worst {worst:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
