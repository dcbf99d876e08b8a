"""``python -m bench.apply [--jobs N] [--format yaml|json] [--overdue] [--profile DIR]``:
how long ``pulse jobs apply FILE`` takes for a file of many jobs, as an operator runs it.

On a throwaway database, ``pulse init``, then three applies of N jobs (``@every 1m``, the
witness handler, a payload, labels, a timeout, retries and a catch-up policy), each a
``pulse jobs apply`` process timed from its start to its exit (interpreter start, reading
the file and the transaction included):

- ``create``: every job new;
- ``same``: the same file again, nothing changes;
- ``reschedule``: every job's schedule changes (``@every 2m``): a revision of each.

No node runs the jobs, so whether the reschedule lands before their first slot (at the next
minute) or after it depends on the second the run starts. ``--overdue`` makes it the second
case every time: before the reschedule, every job's slot is set to the start of the
current minute, so the apply moves each job past its overdue slot and records it skipped
(one a job, two if a minute begins in between).

Printed: wall seconds and jobs per second of each, and with ``--overdue`` the slots
recorded. ``--profile DIR`` runs each apply under cProfile and leaves ``DIR/<step>.prof``
(read with ``python -m pstats``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
import yaml
from psycopg import sql

from bench.database import HANDLER, BenchDatabase, job_name
from cluster.local.processes import pulse_env
from cluster.settings import ClusterSettings

REPO = Path(__file__).resolve().parent.parent
OUTAGE = "UPDATE {schema}.jobs SET slot_at = date_trunc('minute', now()), \
next_run_at = date_trunc('minute', now())"
SKIPPED = "SELECT count(*) FROM {schema}.runs WHERE status = 'skipped'"
STEPS = (("create", "@every 1m"), ("same", "@every 1m"), ("reschedule", "@every 2m"))


def jobs_file(path: Path, count: int, schedule: str, fmt: str) -> None:
    """``count`` simple jobs, as a job file of ``fmt`` (yaml or json)."""
    jobs = [
        {
            "name": job_name(i),
            "schedule": schedule,
            "handler": HANDLER,
            "payload": {"n": i},
            "labels": {"team": f"t{i % 10}"},
            "timeout": "30s",
            "retries": 2,
            "catch_up": "skip",
        }
        for i in range(count)
    ]
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    text = json.dumps(jobs) if fmt == "json" else yaml.dump(jobs, Dumper=dumper, sort_keys=False)
    path.write_text(text, "utf-8")


def pulse(settings: ClusterSettings, *args: str, profile: Path | None = None) -> float:
    """Run ``pulse ARGS`` (under cProfile into ``profile`` if given); its wall seconds."""
    runner = ["-m", "cProfile", "-o", str(profile)] if profile else []
    argv = [sys.executable, *runner, "-m", "node", "--log-level", "WARNING", *args]
    started = time.monotonic()
    done = subprocess.run(argv, env=pulse_env(settings), cwd=REPO, capture_output=True, text=True)
    elapsed = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"pulse {' '.join(args)} exited {done.returncode}: {done.stderr}")
    return elapsed


def run_sql(settings: ClusterSettings, statement: str) -> int:
    """Run ``statement`` (``{schema}`` the cluster's) on the bench database: the count it
    selects, or the rows it changed."""
    text = sql.SQL(statement).format(schema=sql.Identifier(settings.schema))
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        cur = conn.execute(text)
        row = cur.fetchone() if cur.description else None
        return cur.rowcount if row is None else int(row[0])


def measure(
    count: int, fmt: str, profile: Path | None, overdue: bool
) -> tuple[list[tuple[str, float]], int]:
    """Each step's name and wall seconds, and the slots recorded skipped."""
    db = BenchDatabase.new()
    asyncio.run(db.create())
    try:
        settings = db.cluster("pulse", db.name)
        pulse(settings, "init")
        timed = []
        with tempfile.TemporaryDirectory(prefix="pulse-apply-") as work:
            for step, schedule in STEPS:
                path = Path(work) / f"{step}.{fmt}"
                jobs_file(path, count, schedule, fmt)
                if overdue and step == "reschedule":
                    run_sql(settings, OUTAGE)
                where = None if profile is None else profile / f"{step}.prof"
                timed.append((step, pulse(settings, "jobs", "apply", str(path), profile=where)))
        return timed, run_sql(settings, SKIPPED)
    finally:
        asyncio.run(db.drop())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.apply", description=__doc__)
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs in the file [10000]")
    parser.add_argument("--format", choices=("yaml", "json"), default="yaml")
    parser.add_argument(
        "--overdue", action="store_true", help="reschedule jobs whose slots are overdue"
    )
    parser.add_argument("--profile", type=Path, default=None, help="cProfile into DIR")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    timed, skipped = measure(args.jobs, args.format, args.profile, args.overdue)
    for step, seconds in timed:
        rate = args.jobs / seconds
        print(f"apply {step:<10} {args.jobs:>8} jobs ({args.format}): {seconds:7.2f} s, "
              f"{rate:8.0f} jobs/s")  # fmt: skip
    if args.overdue:
        print(f"overdue slots recorded skipped: {skipped}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
