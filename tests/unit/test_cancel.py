"""Stopping a run on request (``Executor.stop``): each kind of handler ends in one
``cancelled`` outcome naming who asked, a shell's whole process group is gone, a handler
that ignores the request is abandoned after its grace, overlap ``replace`` stops a run when
the next slot falls due, and a cancelled slot is never retried."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cluster.errors import InvalidInput
from cluster.jobs.spec import JobSpec
from cluster.store.lock.records import ClaimedJob
from node.handlers.context import Outcome, RunContext
from node.pipeline.executor import Executor
from node.pipeline.outcomes import after_run
from tests.helpers.claimed import Executors, Outcomes, job
from tests.helpers.nodes import pid_gone
from tests.helpers.waiting import until

HERE = __name__
started = threading.Event()
ignore = threading.Event()


@pytest.fixture(autouse=True)
def _reset() -> None:
    started.clear()
    ignore.clear()


async def sleeps_async(ctx: RunContext) -> None:
    ctx.log("going")
    started.set()
    await asyncio.sleep(60)


def polls_sync(ctx: RunContext) -> None:
    started.set()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        ctx.raise_if_cancelled()
        ctx.cancelled.wait(0.01)


def ignores_sync(ctx: RunContext) -> None:
    started.set()
    ignore.wait(30)


def finishes_anyway(ctx: RunContext) -> str:
    started.set()
    ctx.cancelled.wait(30)
    return "done"


async def wait_started() -> None:
    assert await asyncio.to_thread(started.wait, 20), "the handler did not start"


async def written(path: Path) -> str:
    """The text of ``path`` once something is in it."""
    text: str = await until(
        lambda: path.exists() and path.read_text().strip(), f"a line in {path}", 20, interval_s=0.01
    )
    return text


async def stopped(
    executor: Executor,
    done: Outcomes,
    j: ClaimedJob,
    by: str = "ops",
    started_when: Callable[[], Awaitable[object]] = wait_started,
) -> Outcome:
    """Submit ``j``, ask to stop it once ``started_when`` shows it has; its one outcome."""
    executor.submit(j)
    await started_when()
    assert executor.stop(j.id, j.lease_token, by)
    await done.wait_for(1)
    return done.got[j.name]


@pytest.mark.parametrize("handler", ["sleeps_async", "polls_sync"])
async def test_a_python_handler_stops_and_is_recorded_cancelled(
    executors: Executors, handler: str
) -> None:
    executor, done = executors(2)
    outcome = await stopped(executor, done, job(f"{HERE}:{handler}"), "ops@host")
    assert outcome.status == "cancelled"
    assert outcome.error == "cancelled by ops@host"
    assert executor.free == 2


async def test_an_async_handler_keeps_its_log_when_cancelled(executors: Executors) -> None:
    executor, done = executors(1)
    outcome = await stopped(executor, done, job(f"{HERE}:sleeps_async"))
    assert '"going"' in (outcome.output or "")


async def test_a_shell_process_group_gets_sigterm_then_is_gone(
    executors: Executors, tmp_path: Path
) -> None:
    executor, done = executors(1)
    # The shell starts a child in its group and reports both pids; SIGTERM ends them.
    pids = tmp_path / "pids"
    j = job(f"shell:sleep 60 & echo $$ $! > {pids}; wait")._replace(cancel_grace_s=5.0)
    outcome = await stopped(executor, done, j, started_when=lambda: written(pids))
    assert outcome.status == "cancelled"
    assert outcome.duration_s < 5.0  # SIGTERM was enough: no wait for the grace
    for pid in [int(p) for p in pids.read_text().split()]:
        await until(lambda p=pid: pid_gone(p), f"process {pid} to end", interval_s=0.02)


async def test_a_shell_cancelled_while_its_process_starts_is_stopped_at_once(
    executors: Executors,
) -> None:
    """The stop lands while asyncio is still connecting the new process's pipes: the run
    must not hang (asyncio cannot undo a half-made transport) nor leave its group behind."""
    executor, done = executors(1)
    marker = f"{60 + time.monotonic_ns() % 1000 / 1000:.3f}"  # a sleep only this run starts
    j = job(f"shell:sleep {marker} & wait")._replace(cancel_grace_s=5.0)
    executor.submit(j)
    await asyncio.sleep(0)  # the run's task forks the shell, then waits for its pipes
    assert executor.stop(j.id, j.lease_token, "ops")
    await done.wait_for(1)
    outcome = done.got[j.name]
    assert outcome.status == "cancelled" and "abandoned" not in (outcome.error or "")
    assert outcome.duration_s < 5.0
    await until(lambda: not running(marker), f"no process to run {marker}", interval_s=0.02)


async def test_a_shell_that_ignores_sigterm_is_killed_after_the_grace(
    executors: Executors, tmp_path: Path
) -> None:
    executor, done = executors(1)
    ready = tmp_path / "ready"
    j = job(f"shell:trap '' TERM; echo up > {ready}; sleep 60 & wait")._replace(cancel_grace_s=0.5)
    outcome = await stopped(executor, done, j, started_when=lambda: written(ready))
    assert outcome.status == "cancelled"
    assert outcome.duration_s >= 0.5


async def test_a_sync_handler_that_ignores_the_request_is_abandoned_after_the_grace(
    executors: Executors,
) -> None:
    executor, done = executors(1)
    outcome = await stopped(
        executor, done, job(f"{HERE}:ignores_sync")._replace(cancel_grace_s=0.0)
    )
    assert outcome.status == "cancelled"
    assert "abandoned" in (outcome.error or "")
    assert executor.free == 1
    ignore.set()


async def test_a_run_that_finishes_its_work_despite_the_request_keeps_its_outcome(
    executors: Executors,
) -> None:
    executor, done = executors(1)
    outcome = await stopped(executor, done, job(f"{HERE}:finishes_anyway"))
    assert outcome.status == "succeeded"


async def test_stop_names_one_lease(executors: Executors) -> None:
    executor, done = executors(1)
    j = job(f"{HERE}:sleeps_async")
    executor.submit(j)
    await wait_started()
    assert not executor.stop(j.id, j.lease_token + 1, "ops")  # another claim's run
    assert executor.running
    assert executor.stop(j.id, j.lease_token, "ops")
    assert executor.stop(j.id, j.lease_token, "ops again")  # already stopping: once
    await done.wait_for(1)
    assert done.got["j"].error == "cancelled by ops"


async def test_a_slot_claimed_with_a_cancel_request_does_not_run(executors: Executors) -> None:
    executor, done = executors(1)
    executor.submit(job(f"{HERE}:sleeps_async")._replace(cancel_by="ops"))
    await done.wait_for(1)
    assert done.got["j"] == Outcome("cancelled", "cancelled by ops", 0.0)
    assert not started.is_set()


async def test_replace_stops_a_run_when_the_next_slot_is_due(executors: Executors) -> None:
    executor, done = executors(1)
    executor.submit(job(f"{HERE}:sleeps_async")._replace(overlap="replace"), replace_in_s=0.2)
    await done.wait_for(1)
    assert done.got["j"].status == "cancelled"
    assert "overlap replace" in (done.got["j"].error or "")


async def test_replace_leaves_a_run_that_ended_in_time_alone(executors: Executors) -> None:
    executor, done = executors(1)
    executor.submit(job("shell:true")._replace(overlap="replace"), replace_in_s=0.5)
    await done.wait_for(1)
    assert done.got["j"].status == "succeeded"
    await asyncio.sleep(0.6)  # the timer went with the run: nothing more is reported
    assert list(done.got) == ["j"]


async def test_replace_does_not_wait_for_a_sync_handler_that_ignores_the_request(
    executors: Executors,
) -> None:
    """Python cannot stop a thread: the run is recorded cancelled when the next slot is due
    and its execution slot freed for that slot, while the thread runs on, reported to
    nobody (before, the next slot waited for the handler or the cancel grace)."""
    executor, done = executors(1)
    j = job(f"{HERE}:ignores_sync")._replace(overlap="replace", cancel_grace_s=600.0)
    executor.submit(j, replace_in_s=600.0)
    await wait_started()
    assert executor.replace(j.id, j.lease_token)  # as when the next slot is due
    await done.wait_for(1)  # long before the grace
    outcome = done.got["j"]
    assert outcome.status == "cancelled" and "overlap replace" in (outcome.error or "")
    assert executor.free == 1 and executor.threads.stuck == 1 and not ignore.is_set()
    ignore.set()


async def replaced_shell(executor: Executor, tmp_path: Path, grace_s: float) -> tuple[int, int]:
    """A shell that ignores SIGTERM, running, then replaced as when its next slot is due:
    (the shell's pid, its child's pid)."""
    pids = tmp_path / "pids"
    command = f"shell:trap '' TERM; sleep 60 & echo $$ $! > {pids}; wait"
    j = job(command)._replace(overlap="replace", cancel_grace_s=grace_s)
    executor.submit(j, replace_in_s=600.0)
    shell, child = (int(p) for p in (await written(pids)).split())
    assert executor.replace(j.id, j.lease_token)
    return shell, child


async def test_replace_does_not_wait_for_a_shell_within_its_grace(
    executors: Executors, tmp_path: Path
) -> None:
    """A shell that ignores SIGTERM: the run is recorded cancelled at once; its group is
    still killed when the grace ends."""
    executor, done = executors(1)
    shell, child = await replaced_shell(executor, tmp_path, 600.0)
    try:
        await done.wait_for(1)  # long before the grace
        assert done.got["j"].status == "cancelled" and executor.free == 1
        assert not pid_gone(child)  # SIGTERM is ignored: it winds down within its grace
    finally:
        os.killpg(shell, signal.SIGKILL)
    await until(lambda: pid_gone(child), f"process {child} to end", interval_s=0.02)


async def test_a_drain_waits_for_a_replaced_shell_to_wind_down(
    executors: Executors, tmp_path: Path
) -> None:
    """No process group outlives the node: the drain waits for a replaced shell's grace."""
    executor, done = executors(1)
    _, child = await replaced_shell(executor, tmp_path, 0.5)
    await done.wait_for(1)
    assert await executor.drain(30.0) == []
    # The group was killed before the drain returned; the kernel ends it a moment later.
    await until(lambda: pid_gone(child), f"process {child} to end", 5, interval_s=0.02)


def test_a_cancelled_slot_is_not_retried() -> None:
    j = job(f"{HERE}:x")._replace(retries=3)
    now = datetime(2026, 1, 1, 0, 0, 5, tzinfo=UTC)
    done, _ = after_run(j, Outcome("cancelled", "cancelled by ops", 1.0), now)
    assert done.next_attempt == 1 and done.next_slot > j.slot
    failed, _ = after_run(j, Outcome("failed", "boom", 1.0), now)
    assert failed.next_attempt == 2 and failed.next_slot == j.slot


def test_overlap_options_are_validated() -> None:
    spec = JobSpec.build("j", "@every 1m", "m:f", overlap="replace", cancel_grace="3s")
    assert (spec.overlap, spec.cancel_grace_s) == ("replace", 3.0)
    allow = JobSpec.build("j", "@every 1m", "m:f", overlap="allow", max_concurrent="4")
    assert (allow.overlap, allow.max_concurrent) == ("allow", 4)
    for kwargs, field in [
        ({"overlap": "queue"}, "overlap"),
        ({"overlap": "allow", "max_concurrent": 0}, "max_concurrent"),
        ({"max_concurrent": 2}, "max_concurrent"),  # forbid has no in-flight limit
        ({"overlap": "replace", "max_concurrent": 2}, "max_concurrent"),
        ({"cancel_grace": "-1s"}, "cancel_grace"),
    ]:
        with pytest.raises(InvalidInput) as caught:
            JobSpec.build("j", "@every 1m", "m:f", **kwargs)  # type: ignore[arg-type]
        assert caught.value.field == field


def running(text: str) -> list[str]:
    """The processes whose command line holds ``text``."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if text.encode() in (proc / "cmdline").read_bytes():
                found.append(proc.name)
        except OSError:
            continue  # gone meanwhile
    return found
