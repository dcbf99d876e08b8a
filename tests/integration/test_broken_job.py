"""A job whose stored definition no longer parses fails its slot; the node carries on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg

from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from cluster.store.lock.session import LockSession
from node.pipeline.claimer import Claimer
from node.pipeline.clock import DbClock
from node.pipeline.completer import Completer
from node.pipeline.executor import Executor
from node.pipeline.pacing import Pacing
from node.state import NodeState
from node.stats import Stats

ALL = list(range(16))


async def test_unparsable_stored_schedule_fails_the_slot_not_the_node(
    store: JobStore, settings: ClusterSettings
) -> None:
    await store.definitions.add(JobSpec.build("bad", "@every 5s", "cluster.chaos.witness:record"))
    # Not due during the test: its first slot is far in the future.
    far = datetime(2100, 1, 1, tzinfo=UTC)
    await store.definitions.add(
        JobSpec.build("good", "@every 1h", "cluster.chaos.witness:record"), now=far
    )
    # Written by some other tool, or valid under an older release: not parsable now.
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        conn.execute(
            f"UPDATE {settings.schema}.jobs SET schedule = '@every 99999d', "
            "next_run_at = now() - interval '1 second', slot_at = now() - interval '1 second' "
            "WHERE name = 'bad'"
        )
    session = LockSession(settings, "n1", "z", session_timeout_s=10, statement_timeout_s=5)
    await session.open()
    await session.try_lock(ALL)
    state = NodeState("n1", "z", 16, held=frozenset(ALL))
    stats = Stats()
    clock = DbClock()
    pacing = Pacing(clock)
    completer = Completer(session.completions, clock, stats, state.wake, pacing)
    executor = Executor(4, "n1", "z", completer.run_done)
    claimer = Claimer(
        state, session, executor, completer, clock, stats, pacing,
        poll_interval_s=1.0, lease_s=30.0, trust_margin_s=2.0,
    )  # fmt: skip
    try:
        await claimer.run_once()
        assert await completer.flush_once()
        bad = await store.get("bad")
        (run,) = await store.runs(job="bad")
        assert run.status == "failed" and "job definition is invalid" in (run.last_error or "")
        assert bad.status == "idle"
        assert bad.next_run_at - await store.db_now() > timedelta(minutes=59)
        assert stats.outcomes["failed"] == 1 and stats.fired == 0
    finally:
        executor.shutdown()
        await session.close()
