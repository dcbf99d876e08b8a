"""``python -m bench.apply`` at a tiny size: it creates, applies again, reschedules and
reports each, then drops its database."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers import REPO
from tests.helpers.databases import ADMIN_URL, REDIS_URL

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_bench_apply_runs_at_a_tiny_size(fmt: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULSE_")}
    env.update(PULSE_BENCH_ADMIN_URL=ADMIN_URL, PULSE_REDIS_URL=REDIS_URL)
    done = subprocess.run(
        [sys.executable, "-m", "bench.apply", "--jobs", "30", "--format", fmt],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    steps = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("apply ")]
    assert steps == ["create", "same", "reschedule"], done.stdout
    assert all(f"30 jobs ({fmt})" in line for line in done.stdout.splitlines())
