"""Incremental runs against a real Postgres: ``ctx.previous_slot``, ``ctx.last_success_slot``
and ``ctx.state`` come with the claim, and only a fenced, successful completion moves the
state, so a retry or a run whose lease was lost never skips or double-advances a cursor."""

from __future__ import annotations

from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from cluster.store.lock.records import ClaimedJob, Completion
from tests.helpers.sessions import ALL, T0, Opener, at

HANDLER = "cluster.chaos.witness:record"


async def claim_one(open_session: Opener, seconds: float) -> ClaimedJob:
    node = await open_session("node-a", "zone-a")
    (job,) = (await node.claim(ALL, 10, 30.0, now=at(seconds))).jobs
    return job


async def complete(
    open_session: Opener, job: ClaimedJob, outcome: str, state: str | None, seconds: float
) -> set[object]:
    node = await open_session("node-a", "zone-a")
    retry = outcome != "succeeded"
    following = job.slot if retry else job.slot.replace(second=job.slot.second + 10)
    next_run = at(seconds + 1) if retry else following
    done = Completion(
        job.id, job.lease_token, job.slot, outcome, None, 0.1, next_run, following,
        job.attempt + 1 if retry else 1, None, state=state,
    )  # fmt: skip
    return await node.completions.complete([done], now=at(seconds))


async def test_the_state_moves_only_with_a_fenced_success(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await store.definitions.apply([JobSpec.build("a", "@every 10s", HANDLER, retries=1)], now=T0)
    first = await claim_one(open_session, 10)
    assert (first.state, first.previous_slot, first.last_success) == (None, None, None)
    assert await complete(open_session, first, "succeeded", '{"cursor": 10}', 11)

    second = await claim_one(open_session, 20)
    assert second.state == {"cursor": 10}
    assert (second.previous_slot, second.last_success) == (at(10), at(10))
    # A failed attempt's state is dropped: its retry reads the last success's.
    assert await complete(open_session, second, "failed", '{"cursor": 20}', 21)
    retry = await claim_one(open_session, 22)
    assert (retry.slot, retry.attempt, retry.state) == (at(20), 2, {"cursor": 10})
    assert (retry.previous_slot, retry.last_success) == (at(10), at(10))
    # A completion from a node that lost the lease changes nothing.
    stale = retry._replace(lease_token=retry.lease_token - 1)
    assert await complete(open_session, stale, "succeeded", '{"cursor": 99}', 23) == set()
    assert await complete(open_session, retry, "succeeded", '{"cursor": 20}', 23)
    third = await claim_one(open_session, 30)
    assert (third.state, third.previous_slot, third.last_success) == (
        {"cursor": 20},
        at(20),
        at(20),
    )
