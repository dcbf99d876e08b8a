"""A lost attempt counts against the job's retries like a failed one. When the last attempt
its retries allow is lost with its node, recovery does not run the slot again: it hands it
to the recovering node, which records it failed through the completer (``failed`` event,
failed slots in a row, auto-pause) and moves the job to its next slot. So a job that kills
every node that runs it (a poison job) kills at most retries + 1 of them per slot.

The nodes here are lock sessions that claim and then close (a dead process), and an heir
whose recovery and completer are the node's own classes. Real time: recovery runs on the
database clock, as a node's does.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from cluster.store.lock.records import ClaimedJob
from cluster.store.lock.session import LockSession
from node.maintenance.recovery import Recovery
from node.pipeline.clock import DbClock
from node.pipeline.completer import Completer
from node.pipeline.pacing import Pacing
from node.state import NodeState
from node.stats import Stats
from tests.helpers.outbox import ALL, HANDLER, add_rule, names, sql
from tests.helpers.sessions import Opener
from tests.helpers.waiting import until

pytestmark = pytest.mark.timeout(60)
HOOK = "http://127.0.0.1:9/hook"


async def poison_job(store: JobStore, retries: int, **kw: Any) -> None:
    """An hourly job, due now (triggered)."""
    await store.definitions.add(
        JobSpec.build("poison", "@every 1h", HANDLER, retries=retries, **kw)
    )
    await store.trigger("poison")


async def dies_running(open_session: Opener, node_id: str) -> ClaimedJob | None:
    """A node claims the due slot (None if nothing is due), then its process dies (the
    session goes with it)."""
    doomed = await open_session(node_id, f"zone-{node_id}")
    claimed = (await doomed.claim(ALL, 10, 300.0)).jobs
    await doomed.close()
    return claimed[0] if claimed else None


class Heir:
    """A surviving node's recovery, wired to its completer as ``node.runtime`` does."""

    def __init__(self, session: LockSession) -> None:
        self.state = NodeState(session.node_id, session.zone, 16)
        self.state.set_live([session.node_id])
        self.stats = Stats()
        clock = DbClock()
        self.completer = Completer(
            session.completions, clock, self.stats, asyncio.Event(), Pacing(clock)
        )
        self.recovery = Recovery(self.state, session, self.stats, self.completer.run_done)

    async def recover(self) -> int:
        """Recover once the dead sessions have left the server, then write completions."""
        taken: int = await until(
            lambda: self.recovery.recover(frozenset(ALL)), "the dead sessions' slots recovered"
        )
        assert await self.completer.flush_once()
        return taken


async def slot_rows(settings: ClusterSettings) -> list[tuple[str, int, str | None, str | None]]:
    rows = await sql(settings, "SELECT * FROM runs ORDER BY scheduled_for")
    return [(r["status"], r["attempt"], r["node_id"], r["last_error"]) for r in rows]


async def test_a_last_attempt_lost_with_its_node_is_recorded_failed_and_the_job_moves_on(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await poison_job(store, retries=0)
    await add_rule(settings, "ops", HOOK)
    job = await dies_running(open_session, "dead")
    assert job is not None
    heir = Heir(await open_session("heir"))
    assert await heir.recover() == 1

    (row,) = await slot_rows(settings)
    assert row == (
        "failed",
        1,
        "heir",
        "lost with its node on attempt 1 of 1 (owner gone, node dead); retries exhausted, "
        "the slot is not run again",
    )
    after = await store.get("poison")
    assert (after.status, after.attempt, after.failed_slots, after.locked_by) == (
        "idle",
        1,
        1,
        None,
    )
    assert after.slot_at > job.slot and after.next_run_at == after.slot_at  # the next hour
    assert await names(settings) == [("lost", "poison"), ("failed", "poison")]
    assert heir.stats.outcomes["failed"] == 1 and heir.completer.pending == 0


async def test_a_poison_slot_kills_at_most_retries_plus_one_nodes(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await poison_job(store, retries=2)
    heir = Heir(await open_session("heir"))
    first = (await store.get("poison")).slot_at
    killed = []
    for victim in ("n1", "n2", "n3", "n4", "n5"):
        job = await dies_running(open_session, victim)
        if job is None:
            break
        killed.append((victim, job.slot, job.attempt))
        await heir.recover()
    assert killed == [("n1", first, 1), ("n2", first, 2), ("n3", first, 3)]
    (row,) = await slot_rows(settings)
    assert row[:3] == ("failed", 3, "heir")
    assert row[3] is not None and row[3].startswith("lost with its node on attempt 3 of 3")
    assert (await store.get("poison")).slot_at > first


async def test_a_poison_slot_counts_towards_auto_pause(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await poison_job(store, retries=0, pause_after_failures=1)
    await add_rule(settings, "ops", HOOK, events="failed,paused")
    await dies_running(open_session, "dead")
    await Heir(await open_session("heir")).recover()
    job = await store.get("poison")
    assert (job.status, job.paused) == ("paused", True)
    assert job.pause_note is not None
    assert job.pause_note.startswith("paused after 1 failed slots in a row; last error: lost")
    assert await names(settings) == [("failed", "poison"), ("paused", "poison")]


async def test_a_restarted_node_hands_its_own_poison_slot_to_itself(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await poison_job(store, retries=0)
    await dies_running(open_session, "n1")
    again = await open_session("n1")
    heir = Heir(again)
    assert await heir.recovery.recover_own() == 1
    assert await heir.completer.flush_once()
    (row,) = await slot_rows(settings)
    assert row[:3] == ("failed", 1, "n1")
    assert row[3] is not None and "previous process gone" in row[3]
    assert (await store.get("poison")).status == "idle"


async def test_other_lost_attempts_run_again_while_retries_last(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await poison_job(store, retries=1)
    await dies_running(open_session, "dead")
    heir = Heir(await open_session("heir"))
    await heir.recover()
    job = await store.get("poison")
    assert (job.status, job.attempt, job.failed_slots) == ("idle", 2, 0)
    assert await slot_rows(settings) == [("lost", 1, "dead", "owner gone (node dead)")]
