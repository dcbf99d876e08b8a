"""The executor and its handler threads: every kind of handler ends in exactly one outcome,
slots free as runs end, and a stuck sync handler neither blocks the others nor the exit."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Awaitable
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from node.handlers.context import RunContext
from node.pipeline import executor as executor_module
from tests.helpers.claimed import Executors, job
from tests.helpers.waiting import until

HERE = __name__
release = threading.Event()
seen: list[str] = []


def ok(ctx: RunContext) -> None:
    seen.append(ctx.job_name)


def boom(ctx: RunContext) -> None:
    raise ValueError("no such tenant")


def leaves(ctx: RunContext) -> None:
    sys.exit(3)


def stuck(ctx: RunContext) -> None:
    release.wait(30)


async def coro(ctx: RunContext) -> None:
    await asyncio.sleep(0)
    seen.append(ctx.job_name)


def returns_awaitable(ctx: RunContext) -> Awaitable[None]:
    return coro(ctx)


@pytest.fixture(autouse=True)
def _reset() -> None:
    release.clear()
    seen.clear()


async def test_each_kind_of_handler_ends_in_one_outcome(executors: Executors) -> None:
    executor, done = executors(10)
    cases = {
        "ok": f"{HERE}:ok",
        "boom": f"{HERE}:boom",
        "exit": f"{HERE}:leaves",
        "async": f"{HERE}:coro",
        "awaitable": f"{HERE}:returns_awaitable",
        "missing": f"{HERE}:nothing_here",
        "unimportable": "no_such_module_anywhere:fn",
        "shell": "shell:exit 4",
    }
    for name, handler in cases.items():
        executor.submit(job(handler, name))
    await done.wait_for(len(cases))
    status = {name: o.status for name, o in done.got.items()}
    assert status == {
        "ok": "succeeded",
        "boom": "failed",
        "exit": "failed",
        "async": "succeeded",
        "awaitable": "succeeded",
        "missing": "failed",
        "unimportable": "failed",
        "shell": "failed",
    }
    assert "ValueError: no such tenant" in (done.got["boom"].error or "")
    assert done.got["exit"].error == "handler called sys.exit(3)"
    assert "exit status 4" in (done.got["shell"].error or "")
    assert sorted(seen) == ["async", "awaitable", "ok"]
    assert executor.free == 10 and executor.idle.is_set()


async def test_many_sync_runs_free_every_slot(executors: Executors) -> None:
    executor, done = executors(50)
    for round_ in range(4):
        for i in range(50):
            executor.submit(job(f"{HERE}:ok", f"r{round_}-{i}"))
        assert executor.free == 0
        await done.wait_for(50 * (round_ + 1))
        assert executor.free == 50
    assert all(o.status == "succeeded" for o in done.got.values())
    assert len(seen) == 200
    assert executor.threads.threads <= 50


async def test_a_stuck_sync_handler_times_out_and_does_not_block_others(
    executors: Executors,
) -> None:
    executor, done = executors(1)
    executor.submit(job(f"{HERE}:stuck", "stuck", timeout_s=0.2))
    await done.wait_for(1)
    assert done.got["stuck"].status == "timed_out"
    assert done.got["stuck"].error == "timed out after 0.2s"
    assert executor.free == 1
    # The stuck thread still runs; the next run gets a thread of its own.
    executor.submit(job(f"{HERE}:ok", "next"))
    await done.wait_for(2)
    assert done.got["next"].status == "succeeded"
    release.set()


async def test_cancel_and_drain_report_nothing_and_free_the_slots(executors: Executors) -> None:
    executor, done = executors(4)
    a, b = job(f"{HERE}:stuck", "a"), job("shell:sleep 30", "b")
    executor.submit(a)
    executor.submit(b)
    assert executor.cancel(a.id, a.lease_token + 1) is None, "not the lease of this run"
    assert executor.cancel(a.id, a.lease_token) == a
    assert executor.free == 3
    left = await executor.drain(0.1)
    assert left == [b]
    assert executor.free == 4 and executor.idle.is_set()
    release.set()
    # a's thread ends now; its result must go nowhere
    await until(lambda: not executor.threads.stuck, "a's thread to end", 10, interval_s=0.01)
    await asyncio.sleep(0)  # a delivery scheduled by that thread would run here
    assert done.got == {}


async def test_a_shorter_deadline_submitted_later_times_out_first(executors: Executors) -> None:
    executor, done = executors(3)
    executor.submit(job(f"{HERE}:stuck", "long", timeout_s=30))
    executor.submit(job(f"{HERE}:stuck", "short", timeout_s=0.2))
    await done.wait_for(1)
    assert list(done.got) == ["short"] and done.got["short"].status == "timed_out"
    assert executor.free == 2  # "long" still holds its slot
    release.set()
    await done.wait_for(2)
    assert done.got["long"].status == "succeeded"


async def test_a_run_is_not_held_up_by_busy_handlers(executors: Executors) -> None:
    executor, done = executors(8)
    for round_ in range(3):
        # Each round: busy handlers hold some threads while quick runs arrive.
        for i in range(3):
            executor.submit(job(f"{HERE}:stuck", f"busy{round_}-{i}"))
        for i in range(4):
            executor.submit(job(f"{HERE}:ok", f"quick{round_}-{i}"))
        await done.wait_for(4 * (round_ + 1) + 3 * round_)
        assert not any(name.startswith(f"busy{round_}") for name in done.got)
        release.set()
        await done.wait_for(7 * (round_ + 1))
        release.clear()
    assert all(o.status == "succeeded" for o in done.got.values())
    assert executor.threads.threads <= 8


async def test_threads_stuck_in_timed_out_runs_are_capped(
    executors: Executors,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A handler that hangs every time gets at most ``concurrency`` extra threads; then
    new runs wait for one (and time out), with a warning, instead of growing threads."""
    executor, done = executors(1)
    for i in range(5):
        executor.submit(job(f"{HERE}:stuck", f"hang{i}", timeout_s=0.1))
        await done.wait_for(i + 1)
    assert all(o.status == "timed_out" for o in done.got.values())
    assert executor.threads.threads == 2 and executor.threads.stuck == 2
    warnings = [r for r in caplog.records if getattr(r, "event", "") == "handler_threads_stuck"]
    assert len(warnings) == 1
    release.set()  # the stuck threads come free and take over the runs that waited
    executor.submit(job(f"{HERE}:ok", "after"))
    await done.wait_for(6)
    assert done.got["after"].status == "succeeded"
    assert executor.threads.threads == 2


async def test_a_run_claimed_ahead_holds_its_slot_and_starts_when_due(executors: Executors) -> None:
    executor, done = executors(2)
    loop = asyncio.get_running_loop()
    submitted = loop.time()
    executor.submit(job(f"{HERE}:ok", "early"), start_in_s=0.2)
    assert executor.free == 1 and not executor.idle.is_set()
    assert seen == [], "not started before it is due"
    await done.wait_for(1)
    assert loop.time() - submitted >= 0.19
    assert (seen, done.got["early"].status) == (["early"], "succeeded")
    assert executor.free == 2 and executor.idle.is_set()


async def test_a_run_claimed_ahead_waits_again_when_the_wall_clock_stepped_back(
    executors: Executors, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its timer is monotonic; the slot is due by the wall clock, which a time daemon may
    step back while the run waits: it then waits for the difference, never starts early."""
    executor, done = executors(1)
    executor.submit(job(f"{HERE}:ok", "stepped"), start_in_s=30)
    (found,) = executor.running.values()
    stepped = found.due - 5.0
    monkeypatch.setattr(executor_module, "time", SimpleNamespace(time=lambda: stepped))
    executor._start_if_current(found)  # the timer fires: by the stepped clock 5 s remain
    assert (seen, found.ctx) == ([], None)
    assert found.started - asyncio.get_running_loop().time() == pytest.approx(5.0, abs=0.5)
    monkeypatch.setattr(executor_module, "time", SimpleNamespace(time=lambda: found.due))
    executor._start_if_current(found)
    await done.wait_for(1)
    assert (seen, done.got["stepped"].status) == (["stepped"], "succeeded")


async def test_a_run_cancelled_before_it_starts_never_runs(executors: Executors) -> None:
    executor, done = executors(3)
    later, kept = job(f"{HERE}:ok", "later"), job(f"{HERE}:ok", "kept")
    # Due at the same instant: they wait for the same start.
    executor.submit(later, start_in_s=0.05)
    executor.submit(kept, start_in_s=0.05)
    assert executor.cancel(later.id, later.lease_token) is later
    assert executor.free == 2
    await done.wait_for(1)
    assert (seen, set(done.got)) == (["kept"], {"kept"})
    assert executor.free == 3 and executor.idle.is_set()
    # Drained before its start, a run claimed ahead is handed back for release.
    again = job(f"{HERE}:ok", "again")
    executor.submit(again, start_in_s=30)
    assert await executor.drain(0.01) == [again]
    assert (seen, set(done.got), executor.free) == (["kept"], {"kept"}, 3)


@pytest.mark.parametrize("handler", [f"{HERE}:stuck", "shell:sleep 30"])
async def test_a_job_claimed_again_replaces_the_run_of_its_earlier_lease(
    executors: Executors, handler: str
) -> None:
    executor, done = executors(2)
    old = job(handler, "again")
    executor.submit(old)
    # The lease was lost meanwhile (the node was frozen, say) and the job claimed again.
    new = old._replace(handler=f"{HERE}:ok", lease_token=old.lease_token + 1)
    executor.submit(new)
    assert executor.free == 1, "the earlier run no longer holds a slot"
    await done.wait_for(1)
    assert done.got["again"].status == "succeeded" and seen == ["again"]
    assert executor.free == 2 and executor.idle.is_set()
    release.set()  # the earlier run's thread ends; its result goes nowhere
    assert executor.cancel(new.id, old.lease_token) is None


async def test_the_context_tells_the_handler_its_slot_key_and_deadline(
    executors: Executors,
) -> None:
    executor, _ = executors(1, zone="zone-a")
    claimed = job(f"{HERE}:ok", timeout_s=90.0)
    ctx = executor.context(claimed)
    assert (ctx.job_id, ctx.job_name, ctx.tenant_id) == (claimed.id, "j", "t")
    assert (ctx.scheduled_for, ctx.attempt, ctx.node_id, ctx.zone) == (
        claimed.slot,
        1,
        "n1",
        "zone-a",
    )
    assert ctx.idempotency_key == f"{claimed.id}:2026-01-01T00:00:00+00:00"
    assert ctx.deadline == datetime(2026, 1, 1, 0, 1, 30, tzinfo=UTC)


async def test_a_job_claimed_without_a_payload_gets_a_fresh_empty_one_per_run(
    executors: Executors,
) -> None:
    executor, _ = executors(1, zone="zone-a")
    claimed = job(f"{HERE}:ok")._replace(payload=None)
    first, second = executor.context(claimed), executor.context(claimed)
    assert first.payload == {} and second.payload == {}
    assert first.payload is not second.payload  # a handler that fills it affects no other
    rich = job(f"{HERE}:ok")._replace(payload={"n": 1})
    assert executor.context(rich).payload == {"n": 1}


async def test_the_context_a_handler_gets_is_an_ordinary_run_context(executors: Executors) -> None:
    j = job(f"{HERE}:ok")._replace(payload=None, attempt=2, output_limit=100)
    executor, _ = executors(1, zone="z1")
    ctx = executor.context(j)
    expected = RunContext(
        job_id=j.id,
        job_name="j",
        tenant_id="t",
        payload={},
        scheduled_for=j.slot,
        attempt=2,
        timeout_s=30.0,
        node_id="n1",
        zone="z1",
        output_limit=100,
        fencing_token=j.lease_token,
    )
    assert ctx == expected

    def fields(c: RunContext) -> dict[str, object]:
        # Each run logs, and is cancelled, on its own.
        return {k: v for k, v in vars(c).items() if k not in ("_log", "cancelled")}

    assert fields(ctx) == fields(expected)  # every field set, none more
    assert ctx._log is not expected._log
    assert ctx.cancelled is not expected.cancelled and not ctx.cancelled.is_set()
    assert ctx.idempotency_key == f"{j.id}:{j.slot.isoformat()}"
    with pytest.raises(AttributeError):
        ctx.attempt = 3  # type: ignore[misc]
