"""``python -m bench.apply`` at a tiny size: it creates, applies again, reschedules and
reports each, then drops its database."""

from __future__ import annotations

import pytest

from tests.helpers.benches import run_bench

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_bench_apply_runs_at_a_tiny_size(fmt: str) -> None:
    done = run_bench("apply", "--jobs", "30", "--format", fmt)
    steps = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("apply ")]
    assert steps == ["create", "same", "reschedule"], done.stdout
    assert all(f"30 jobs ({fmt})" in line for line in done.stdout.splitlines())


def test_bench_apply_reschedules_overdue_jobs_and_counts_the_slots_they_pass() -> None:
    done = run_bench("apply", "--jobs", "30", "--overdue")
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("overdue slots")]
    assert int(line.rsplit(" ", 1)[1]) in (30, 60), done.stdout  # 1 a job, or 2
