"""``python -m bench.web`` at tiny sizes: it loads, serves, measures and cleans up."""

from __future__ import annotations

import re

import psycopg
import pytest

from tests.helpers.benches import run_bench
from tests.helpers.databases import ADMIN_URL

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def bench_databases() -> set[str]:
    with psycopg.connect(ADMIN_URL) as conn:
        rows = conn.execute("SELECT datname FROM pg_database WHERE datname LIKE 'pulse_bench_%'")
        return {name for (name,) in rows}


def test_bench_web_runs_at_tiny_sizes() -> None:
    done = run_bench("web", "--jobs", "300", "--runs", "1500", "--samples", "5")
    assert "| runs, first page |" in done.stdout and "target p99 ratio" in done.stdout
    name = re.search(r"^database (pulse_bench_\w+)", done.stdout, flags=re.MULTILINE)
    assert name is not None and name[1] not in bench_databases(), "its database is dropped"
