"""Cancel requests in Postgres: ``store.runcontrol.cancel`` marks the running claim and notifies the
nodes, lease renewal reports the request, the completion of the slot clears it (a request
never outlives its slot), and recovery hands a cancelled slot of a dead owner over to be
recorded ``cancelled`` instead of running it again."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from cluster.errors import NotFound, NotRunning
from cluster.settings import ClusterSettings
from cluster.store import notify
from cluster.store.jobstore.store import JobStore
from node.handlers.context import Outcome
from node.pipeline.outcomes import after_run
from tests.helpers.sessions import ALL, Opener, add_jobs, at, run_rows


async def test_cancel_marks_the_running_claim_and_renewal_reports_it(
    store: JobStore, open_session: Opener, settings: ClusterSettings
) -> None:
    (job,) = await add_jobs(store, 1)
    with pytest.raises(NotRunning, match="no job 'job-0000' in tenant 'default' is running"):
        await store.runcontrol.cancel("job-0000", by="ops")
    with pytest.raises(NotFound):
        await store.runcontrol.cancel("nope", by="ops")
    a = await open_session("node-a")
    (claimed,) = (await a.claim(ALL, 10, 30.0, now=at(10))).jobs

    with pytest.raises(NotRunning, match=r"no slot .* of job"):
        await store.runcontrol.cancel("job-0000", by="ops", slot=at(20))
    payloads: asyncio.Queue[str] = asyncio.Queue()
    stop = asyncio.Event()
    listening = asyncio.create_task(notify.listen(settings, "n1", payloads.put_nowait, stop))
    try:
        await asyncio.sleep(0)  # the LISTEN may race the NOTIFY: retried below until heard
        (asked,) = await store.runcontrol.cancel("job-0000", by="ops\non call", slot=claimed.slot)
        assert (asked.slot, asked.attempt, asked.node_id) == (claimed.slot, 1, "node-a")
        assert (await store.get("job-0000")).cancel_by == "ops on call"
        expected = f"cancel:{job.id}:{claimed.lease_token}::ops on call"
        async with asyncio.timeout(10):
            while True:
                with contextlib.suppress(TimeoutError):
                    if await asyncio.wait_for(payloads.get(), 0.5) == expected:
                        break
                await store.runcontrol.cancel("job-0000", by="ops on call")
    finally:
        stop.set()
        await listening
    renewed = await a.renew([(claimed.id, claimed.lease_token)], 30.0, now=at(11))
    assert renewed == {claimed.id: "ops on call"}

    done, _ = after_run(claimed, Outcome("cancelled", "cancelled by ops on call", 1.0), at(12))
    assert await a.completions.complete([done], now=at(12)) == {claimed.id}
    after = await store.get("job-0000")
    assert (after.status, after.cancel_by, after.slot_at) == ("idle", None, at(20))
    assert await run_rows(store, "job-0000") == [(at(10), "cancelled", "node-a", 1)]
    (run,) = await store.runs(job="job-0000")
    assert run.last_error == "cancelled by ops on call"


async def test_recovery_hands_over_a_cancelled_slot_of_a_dead_owner(
    store: JobStore, open_session: Opener
) -> None:
    await add_jobs(store, 1, retries=5)
    a = await open_session("node-a")
    (claimed,) = (await a.claim(ALL, 10, 30.0, now=at(10))).jobs
    await store.runcontrol.cancel("job-0000", by="ops")
    b = await open_session("node-b")
    (row,) = await b.recover(ALL, ["node-b"], now=at(50))  # a's lease expired at 40
    # Retries are left, yet the slot is not run again: it is handed over as poison.
    assert row["poison"] and row["cancel_by"] == "ops"
    job = await store.get("job-0000")
    assert (job.status, job.locked_by) == ("running", "node-b")
    assert job.lease_token > claimed.lease_token
