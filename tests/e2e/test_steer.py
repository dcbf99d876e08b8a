"""Runs you can steer, end to end with real node processes and the real CLI.

- ``pulse runs cancel`` (from a separate process, as from another host) stops an async, a
  sync and a shell handler on the nodes running them; each slot is recorded ``cancelled``
  with who asked, not retried, and the shell's process group is gone.
- A cancel request for a frozen (SIGSTOPped) node is carried out by recovery: the slot is
  recorded cancelled and never run again, and the frozen node's late write is fenced.
- Overlap ``replace`` cancels a run when the next slot falls due and starts that slot at
  once, also when the handler ignores the request (a sync function in its thread, a shell
  that traps SIGTERM): every slot runs, none is coalesced away.
"""

from __future__ import annotations

import asyncio
import itertools
import signal
from datetime import datetime
from pathlib import Path

import pytest

from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from tests.helpers.cli import spawn
from tests.helpers.fleet import Fleet
from tests.helpers.nodes import init_cluster, pid_gone
from tests.helpers.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(150)]
HANDLERS = "tests.e2e.steer_handlers"


def trigger(settings: ClusterSettings, *names: str) -> None:
    async def go() -> None:
        async with JobStore.open(settings) as store:
            for name in names:
                await store.trigger(name)

    asyncio.run(go())


def runs_of(fleet: Fleet, job: str) -> list[dict[str, object]]:
    return fleet.sql(
        "SELECT scheduled_for, status, attempt, node_id, last_error, started_at, finished_at"
        " FROM runs WHERE job_name = %s ORDER BY scheduled_for",
        (job,),
    )


def test_cancel_stops_async_sync_and_shell_handlers(
    settings: ClusterSettings, fleet: Fleet, tmp_path: Path
) -> None:
    pids = tmp_path / "shell.pids"
    payload = {"dir": str(tmp_path)}
    specs = [
        JobSpec.build("async", "@daily", f"{HANDLERS}:sleeps", payload=payload, retries=2),
        JobSpec.build("sync", "@daily", f"{HANDLERS}:polls", payload=payload, retries=2),
        JobSpec.build(
            "shell",
            "@daily",
            f"shell:echo $$ > {pids}; sleep 600 & echo $! >> {pids}; wait",
            retries=2,
            cancel_grace="5s",
        ),
    ]
    init_cluster(settings, *specs)
    fleet.start("n1", "a")
    fleet.start("n2", "b")
    trigger(settings, "async", "sync", "shell")
    until(
        lambda: (
            (tmp_path / "async.started").exists()
            and (tmp_path / "sync.started").exists()
            and len(pids.read_text().split()) == 2
            if pids.exists()
            else False
        ),
        "the three handlers to start",
        30,
    )
    group = [int(p) for p in pids.read_text().split()]
    for name in ("async", "sync", "shell"):
        done = spawn(settings, "runs", "cancel", name, "--by", "tester").result()
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"cancelling {name} (tenant default) slot "), done.stdout

    def cancelled() -> bool:
        fleet.check_alive()
        return all(
            [r["status"] for r in runs_of(fleet, n)] == ["cancelled"]
            for n in ("async", "sync", "shell")
        )

    until(cancelled, "the three runs to be recorded cancelled", 30)
    for name in ("async", "sync", "shell"):
        (run,) = runs_of(fleet, name)
        assert run["last_error"] == "cancelled by tester" and run["attempt"] == 1
    until(lambda: all(pid_gone(p) for p in group), "the shell's process group to end", 10)
    jobs = fleet.sql("SELECT name, status, cancel_by FROM jobs ORDER BY name")
    assert [(j["status"], j["cancel_by"]) for j in jobs] == [("idle", None)] * 3

    # Not retried: nothing started again; and nothing is running to cancel now.
    assert len((tmp_path / "async.started").read_text().splitlines()) == 1
    again = spawn(settings, "runs", "cancel", "async").result()
    assert again.returncode == 1 and again.stdout == ""
    assert again.stderr.strip() == "pulse: no job 'async' in tenant 'default' is running"
    missing = spawn(settings, "runs", "cancel", "nope").result()
    assert missing.returncode == 1 and "no job named 'nope'" in missing.stderr


def test_a_cancel_for_a_frozen_node_is_carried_out_by_recovery(
    settings: ClusterSettings, fleet: Fleet, tmp_path: Path
) -> None:
    spec = JobSpec.build(
        "long", "@daily", f"{HANDLERS}:sleeps", payload={"dir": str(tmp_path)}, retries=3
    )
    init_cluster(settings, spec)
    timing = ("--lease", "3s", "--renew-interval", "1s", "--session-timeout", "4s")
    frozen = fleet.start("n1", "a", *timing)
    trigger(settings, "long")
    started = tmp_path / "long.started"
    until(started.exists, "the run to start on n1", 30)
    frozen.signal(signal.SIGSTOP)
    try:
        done = spawn(settings, "runs", "cancel", "long", "--by", "tester").result()
        assert done.returncode == 0, done.stderr
        # Only now a node that can recover n1's slot: had it recovered the slot before the
        # cancel was recorded, the slot would have been retried, not cancelled.
        fleet.start("n2", "b", *timing)

        def recorded() -> list[dict[str, object]]:
            return [r for r in runs_of(fleet, "long") if r["status"] == "cancelled"]

        (run,) = until(recorded, "recovery to record the slot cancelled", 60)
        assert str(run["last_error"]).startswith("cancelled by tester; lost with its node n1")
    finally:
        frozen.signal(signal.SIGCONT)
    # n1 wakes, finds its lease gone and stops the run; its write is fenced. The slot ran
    # once: no other attempt started anywhere.
    until(lambda: fleet.sql("SELECT status FROM jobs")[0]["status"] == "idle", "the job idle", 30)
    assert [r["status"] for r in runs_of(fleet, "long")] == ["cancelled"]
    assert started.read_text().splitlines() == [started.read_text().splitlines()[0]]
    assert fleet.stop_all() == {"n1": 0, "n2": 0}


def test_overlap_replace_cancels_the_running_slot_and_starts_the_next(
    settings: ClusterSettings, fleet: Fleet, tmp_path: Path
) -> None:
    spec = JobSpec.build(
        "replaced",
        "@every 2s",
        f"{HANDLERS}:sleeps",
        payload={"dir": str(tmp_path)},
        overlap="replace",
        cancel_grace="1s",
        catch_up="skip",
    )
    init_cluster(settings, spec)
    fleet.start("n1", "a")

    def replaced() -> list[dict[str, object]]:
        fleet.check_alive()
        rows = [r for r in runs_of(fleet, "replaced") if r["status"] == "cancelled"]
        return rows if len(rows) >= 3 else []

    rows = until(replaced, "three slots replaced by their successors", 60)
    for row in rows:
        assert "overlap replace" in str(row["last_error"])
    # One after the other: each slot started once the one before had ended.
    for before, after in itertools.pairwise(rows):
        assert after["scheduled_for"] > before["scheduled_for"]  # type: ignore[operator]
        assert after["started_at"] >= before["finished_at"]  # type: ignore[operator]
    assert fleet.stop_all() == {"n1": 0}


def test_overlap_replace_does_not_wait_for_handlers_that_ignore_it(
    settings: ClusterSettings, fleet: Fleet, tmp_path: Path
) -> None:
    """A sync handler that sleeps 10 s through every request, and a shell that traps
    SIGTERM, on ``@every 3s`` with the default cancel grace (10 s): each slot is recorded
    cancelled when the next falls due, and that slot runs, so no slot is skipped."""
    common = {"overlap": "replace", "catch_up": "once"}
    specs = [
        JobSpec.build(
            "rp-sync", "@every 3s", f"{HANDLERS}:ignores",
            payload={"dir": str(tmp_path), "sleep_s": 10}, **common,
        ),
        JobSpec.build("rp-shell", "@every 3s", "shell:trap '' TERM; sleep 10", **common),
    ]  # fmt: skip
    init_cluster(settings, *specs)
    fleet.start("n1", "a")

    def replaced(job: str) -> list[dict[str, object]]:
        fleet.check_alive()
        rows = [r for r in runs_of(fleet, job) if r["status"] == "cancelled"]
        return rows if len(rows) >= 3 else []

    for name in ("rp-sync", "rp-shell"):
        rows = until(lambda n=name: replaced(n), f"{name}: three slots replaced", 60)
        for row in rows:
            assert "overlap replace" in str(row["last_error"]), row
        slots: list[datetime] = [r["scheduled_for"] for r in rows]
        assert {(b - a).total_seconds() for a, b in itertools.pairwise(slots)} == {3.0}, slots
        first, last = slots[0], slots[-1]
        between = [r for r in runs_of(fleet, name) if first <= r["scheduled_for"] <= last]
        assert {r["status"] for r in between} == {"cancelled"}, between  # nothing skipped
    assert fleet.stop_all() == {"n1": 0}
