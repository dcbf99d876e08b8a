"""Start jitter: offsets are a stable hash of (tenant, name, slot), within [0, jitter),
uniform enough to spread a fan-out, and a jitter not below the schedule's smallest interval
is refused."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest

from cluster.errors import InvalidInput
from cluster.jobs.spec import JobSpec
from cluster.timing.jitter import check_jitter, jitter_offset, jittered, smallest_interval
from cluster.timing.schedule import parse_schedule

SLOT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
PROBE = (
    "from datetime import datetime; from cluster.timing.jitter import jitter_offset; "
    "print(jitter_offset('acme', 'rollup', datetime.fromisoformat('2026-03-01T12:00:00+00:00'),"
    " 600.0).total_seconds())"
)


def test_offsets_are_stable_across_processes_and_hash_seeds() -> None:
    here = jitter_offset("acme", "rollup", SLOT, 600.0).total_seconds()
    seen = set()
    for seed in ("0", "1", "random"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True
        )
        seen.add(float(out.stdout))
    assert seen == {here}


def test_offsets_depend_on_job_and_slot_and_stay_in_range() -> None:
    offsets = {
        jitter_offset(tenant, name, SLOT + timedelta(minutes=m), 60.0)
        for tenant in ("a", "b")
        for name in ("x", "y")
        for m in range(5)
    }
    assert len(offsets) == 20
    assert all(timedelta(0) <= o < timedelta(seconds=60) for o in offsets)
    assert all(o % timedelta(microseconds=1) == timedelta(0) for o in offsets)
    # The same slot given in another zone is the same instant, hence the same offset.
    berlin = SLOT.astimezone(parse_schedule("@hourly", "Europe/Berlin")._zone)
    assert jitter_offset("a", "x", berlin, 60.0) == jitter_offset("a", "x", SLOT, 60.0)
    assert jittered("a", "x", SLOT, 0.0) == SLOT
    tiny = [jitter_offset("a", str(i), SLOT, 0.000_002) for i in range(50)]
    assert set(tiny) <= {timedelta(0), timedelta(microseconds=1)}


def test_offsets_are_uniform_enough_chi_square() -> None:
    bins, samples = 20, 20_000
    counts = [0] * bins
    for i in range(samples):
        offset = jitter_offset("t", f"job-{i % 100}", SLOT + timedelta(hours=i // 100), 3600.0)
        counts[int(offset.total_seconds() / 3600.0 * bins)] += 1
    expected = samples / bins
    chi2 = sum((c - expected) ** 2 / expected for c in counts)
    assert chi2 < 43.82, counts  # 19 degrees of freedom, p = 0.001


def test_smallest_interval_of_every_and_cron_including_dst() -> None:
    assert smallest_interval(parse_schedule("@every 90s")) == 90.0
    assert smallest_interval(parse_schedule("*/15 * * * *")) == 900.0
    assert smallest_interval(parse_schedule("0 9,17 * * *")) == 8 * 3600.0
    # 01:30 and 03:30 Berlin are one hour apart on the day of the spring change.
    assert smallest_interval(parse_schedule("30 1,3 * * *", "Europe/Berlin")) == 3600.0


@pytest.mark.parametrize(
    ("schedule", "jitter", "message"),
    [
        ("@every 1m", 60.0, "not below the schedule's smallest interval"),
        ("@hourly", 7200.0, "not below"),
        ("@every 1m", -1.0, "must not be negative"),
    ],
)
def test_a_jitter_too_large_or_negative_is_refused(
    schedule: str, jitter: float, message: str
) -> None:
    with pytest.raises(InvalidInput, match=message):
        check_jitter(parse_schedule(schedule), jitter)
    with pytest.raises(InvalidInput, match="jitter"):
        JobSpec.build("j", schedule, "shell:true", jitter=jitter)


def test_job_specs_carry_the_jitter_from_options_and_job_files() -> None:
    assert JobSpec.build("j", "@hourly", "shell:true", jitter="10m").jitter_s == 600.0
    entry = {"name": "j", "schedule": "@every 1m", "handler": "shell:true", "jitter": "30s"}
    spec = JobSpec.from_mapping(entry)
    assert spec.jitter_s == 30.0
    assert spec.validated() == spec


def test_the_node_moves_on_to_the_next_slots_jittered_start_and_plans_on_nominal_slots() -> None:
    from node.handlers.context import Outcome
    from node.pipeline.outcomes import after_run, plan_at_claim, start_of
    from tests.helpers.claimed import job

    j = job("m:f")._replace(schedule="@every 1m", jitter_s=50.0, catch_up="skip", grace_s=0.0)
    slot = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    j = j._replace(slot=slot, due=start_of(j, slot))
    following = slot + timedelta(minutes=1)
    done, skips = after_run(j, Outcome("succeeded", None, 0.01), j.due + timedelta(seconds=1))
    assert (done.next_slot, done.next_run_at, skips) == (
        following,
        jittered(j.tenant, j.name, following, 50.0),
        [],
    )
    # Claimed at its start (up to 50s after the slot) with grace 0: it runs, not skipped.
    assert plan_at_claim(j, slot + timedelta(seconds=49)) is None
    # Slots whose whole window has passed (12:01, 12:02 at 12:02:55) are missed: skip
    # moves on to the next nominal slot, to start at its own offset.
    planned = plan_at_claim(j, slot + timedelta(minutes=2, seconds=55))
    assert planned is not None
    assert planned[0].next_slot == slot + timedelta(minutes=3)
    assert planned[0].next_run_at == jittered(j.tenant, j.name, planned[0].next_slot, 50.0)
