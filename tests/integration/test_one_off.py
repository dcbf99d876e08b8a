"""One-off (``@at``) jobs against a real Postgres: a time in the past is refused with
nothing written, the job is due at its instant, its completion makes it ``done`` (or
deletes it with ``remove_when_done``), re-applying it later changes nothing, and pruning
removes a done job once its runs are gone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cluster.config.retention import Retention
from cluster.errors import InvalidInput
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.housekeeping import pruning
from cluster.store.jobstore.store import JobStore
from node.handlers.context import Outcome
from node.pipeline.outcomes import after_run
from tests.helpers.sessions import Opener

T0 = datetime(2031, 3, 4, 12, 0, tzinfo=UTC)
AT = T0 + timedelta(hours=1)
ALL = range(16)


def one_off(name: str, at: datetime = AT, **options: object) -> JobSpec:
    return JobSpec.build(name, f"@at {at.isoformat()}", "shell:true", **options)  # type: ignore[arg-type]


async def test_a_time_in_the_past_is_refused_and_nothing_is_written(store: JobStore) -> None:
    with pytest.raises(InvalidInput, match="is in the past"):
        await store.definitions.add(one_off("late", T0 - timedelta(seconds=1)), now=T0)
    with pytest.raises(InvalidInput, match="is in the past"):
        await store.definitions.apply([one_off("ok"), one_off("late", T0)], now=T0)
    assert await store.jobs() == []


async def test_a_one_off_runs_once_then_is_done_and_stays_so(
    store: JobStore, open_session: Opener
) -> None:
    job = await store.definitions.add(one_off("once"), now=T0)
    assert (job.status, job.next_run_at, job.slot_at) == ("idle", AT, AT)
    await store.definitions.add(one_off("gone", remove_when_done=True), now=T0)
    node = await open_session("n1")
    claimed = await node.claim(ALL, 10, 30.0, now=AT + timedelta(seconds=1))
    assert sorted(j.name for j in claimed.jobs) == ["gone", "once"]
    done = [after_run(j, Outcome("succeeded", None, 0.1), AT)[0] for j in claimed.jobs]
    assert len(await node.completions.complete(done, now=AT + timedelta(seconds=2))) == 2
    shown = await store.details("once")
    assert (shown["status"], shown["next_run_at"], shown["next_slots"]) == ("done", None, [])
    assert [r["status"] for r in shown["recent_runs"]] == ["succeeded"]
    assert [j.name for j in await store.jobs()] == ["once"], "gone was removed when done"
    nothing = await node.claim(ALL, 10, 30.0, now=AT + timedelta(days=1))
    assert nothing.jobs == [] and nothing.next_due is None
    # Re-applying the same file later changes nothing, the job stays done.
    result = await store.definitions.apply([one_off("once")], now=AT + timedelta(days=1))
    assert result.unchanged == ["once"]
    paused = await store.pause("once")
    assert paused.status == "done"


async def test_pruning_removes_a_done_job_once_its_runs_are_gone(
    store: JobStore, open_session: Opener, settings: ClusterSettings
) -> None:
    await store.definitions.add(one_off("once", keep_for="1h"), now=T0)
    node = await open_session("n1")
    (job,) = (await node.claim(ALL, 10, 30.0, now=AT)).jobs
    await node.completions.complete(
        [after_run(job, Outcome("succeeded", None, 0.1), AT)[0]], now=AT
    )
    async with pruning.side_connection(
        settings, "pulse-test", statement_timeout_s=30
    ).using() as side:
        kept = await pruning.prune(side, Retention(), ALL, now=AT + timedelta(minutes=5))
        assert (kept.runs, kept.done_jobs) == (0, 0)
        gone = await pruning.prune(side, Retention(), ALL, now=AT + timedelta(hours=2))
        assert (gone.runs, gone.done_jobs) == (1, 1)
    assert await store.jobs() == []


async def test_sync_passes_over_a_past_one_off_instead_of_failing_to_start(
    store: JobStore,
) -> None:
    result = await store.definitions.sync(
        [one_off("ran", T0 - timedelta(hours=1)), one_off("soon")], now=T0
    )
    assert (result.created, result.unchanged) == (["soon"], ["ran"])
    assert [j.name for j in await store.jobs()] == ["soon"]
