"""A benchmark module (``python -m bench.<name>``) run as an operator runs it, at sizes a
test can afford, against the test session's Postgres and Redis."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.helpers import REPO
from tests.helpers.databases import ADMIN_URL, REDIS_URL


def run_bench(module: str, *args: str, timeout_s: float = 110) -> subprocess.CompletedProcess[str]:
    """``python -m bench.<module> ARGS`` from the repository; it must exit 0."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULSE_")}
    env.update(PULSE_BENCH_ADMIN_URL=ADMIN_URL, PULSE_REDIS_URL=REDIS_URL)
    done = subprocess.run(
        [sys.executable, "-m", f"bench.{module}", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done
