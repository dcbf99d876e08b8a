"""Blackout windows against a real Postgres: slots inside are recorded skipped with the
window as reason, or deferred to its end where the catch-up policy decides; adding and
removing a window re-plans the jobs it covers in one transaction, a job added later
plans with it, and bad windows write nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cluster.errors import InvalidInput
from cluster.jobs.spec import JobSpec
from cluster.store.jobstore.store import JobStore
from node.handlers.context import Outcome
from node.pipeline.outcomes import after_run, plan_at_claim
from tests.helpers.sessions import Opener

ALL = range(16)
T0 = datetime(2031, 6, 2, 10, 30, tzinfo=UTC)
H = timedelta(hours=1)
ELEVEN = datetime(2031, 6, 2, 11, 0, tzinfo=UTC)


def hourly(name: str = "sync", tenant: str = "default", **options: object) -> JobSpec:
    return JobSpec.build(name, "0 * * * *", "shell:true", tenant=tenant, **options)  # type: ignore[arg-type]


async def test_slots_inside_a_window_are_skipped_with_the_window_as_reason(
    store: JobStore, open_session: Opener
) -> None:
    await store.definitions.add(hourly(), now=T0)
    change = await store.windows.add(ELEVEN + H, ELEVEN + 3 * H, tenant="default", now=T0)
    assert change.replanned == ("default/sync",)
    node = await open_session("n1")
    (job,) = (await node.claim(ALL, 10, 30.0, now=ELEVEN)).jobs
    done, skips = after_run(job, Outcome("succeeded", None, 0.1), ELEVEN)
    assert done.next_slot == ELEVEN + 3 * H
    assert [s.slot for s in skips] == [ELEVEN + H, ELEVEN + 2 * H]
    assert all(f"blackout window {change.window.id}" in s.reason for s in skips)
    await node.completions.complete([done], skips, now=ELEVEN)
    runs = await store.runs(job="sync", tenant="default")
    assert [(r.scheduled_for, r.status) for r in runs][:2] == [
        (ELEVEN + 2 * H, "skipped"), (ELEVEN + H, "skipped")
    ]  # fmt: skip
    other = await store.definitions.add(hourly("late", tenant="other"), now=T0)
    assert other.slot_at == ELEVEN, "another tenant's job is not covered"


async def test_deferred_slots_run_at_the_end_as_catch_up_says(
    store: JobStore, open_session: Opener
) -> None:
    await store.definitions.add(hourly(catch_up="once"), now=T0)
    window = (
        await store.windows.add(ELEVEN + H, ELEVEN + 3 * H, job="sync", defer=True, now=T0)
    ).window
    node = await open_session("n1")
    (job,) = (await node.claim(ALL, 10, 30.0, now=ELEVEN)).jobs
    done, skips = after_run(job, Outcome("succeeded", None, 0.1), ELEVEN)
    assert (done.next_slot, done.next_run_at, skips) == (ELEVEN + H, ELEVEN + 3 * H, [])
    await node.completions.complete([done], skips, now=ELEVEN)
    assert (await node.claim(ALL, 10, 30.0, now=ELEVEN + 2 * H)).jobs == []

    end = window.ends_at
    (deferred,) = (await node.claim(ALL, 10, 30.0, now=end)).jobs
    assert deferred.slot == ELEVEN + H
    skip = plan_at_claim(deferred, end)
    assert skip is not None, "catch-up once runs one slot of those the window deferred"
    coalesced, more = skip
    assert coalesced.next_slot == ELEVEN + 3 * H and [s.slot for s in more] == [ELEVEN + 2 * H]
    await node.completions.complete([coalesced], more, now=end)
    row = await store.get("sync")
    assert (row.slot_at, row.next_run_at) == (ELEVEN + 3 * H, end)

    await store.windows.remove(window.id, now=end)
    assert (await store.get("sync")).calendar_rule is None


async def test_bad_windows_write_nothing(store: JobStore) -> None:
    await store.definitions.add(hourly(), now=T0)
    before = await store.get("sync")
    with pytest.raises(InvalidInput, match="is not after"):
        await store.windows.add(ELEVEN, ELEVEN - H, tenant="default", now=T0)
    with pytest.raises(InvalidInput, match="in the past"):
        await store.windows.add(T0 - 2 * H, T0 - H, tenant="default", now=T0)
    with pytest.raises(InvalidInput, match="no job 'absent' in tenant default"):
        await store.windows.add(ELEVEN, ELEVEN + H, job="absent", now=T0)
    assert await store.windows.list() == []
    assert await store.get("sync") == before


async def test_a_window_that_ends_does_not_change_the_jobs_definition(store: JobStore) -> None:
    await store.definitions.apply([hourly()], now=T0)
    await store.windows.add(ELEVEN, ELEVEN + H, tenant="default", now=T0)
    assert (await store.get("sync")).slot_at == ELEVEN + H
    again = await store.definitions.apply([hourly()], now=ELEVEN + 2 * H)
    assert again.unchanged == ["sync"], "a window over is no change of definition"
    assert (await store.definitions.sync([hourly()], now=ELEVEN + 2 * H)).differing == []
