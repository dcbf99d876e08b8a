"""A watch run that never ends (cluster/store/housekeeping/watches.py): a run a ``/start``
opened whose end ping does not come within the job's ``timeout`` is recorded ``timed_out``
with one ``failed`` alert, by the late pass of any node or by the end ping that comes too
late, once however many do it at the same time; ``pulse runs cancel`` ends one; a late
end ping is noted on the run it belongs to, never a new slot, never overwriting its
outcome. Explicit ``now`` throughout; the HTTP side is tests/e2e/test_watch_e2e.py."""

from __future__ import annotations

import asyncio

import pytest

from cluster.errors import InvalidInput, NotRunning
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.housekeeping.alerts import AlertStore
from cluster.store.jobstore.store import JobStore
from cluster.store.queries import query
from node.maintenance.lateness import LatePass
from node.stats import Stats
from tests.helpers.cli import Invoke
from tests.helpers.outbox import T0, add_rule, at, events, sql
from tests.helpers.roles import Logins, grant_roles

pytestmark = pytest.mark.timeout(60)
HOOK = "http://127.0.0.1:9/hook"
SHARDS = 16
TIMED_OUT = "no end ping within 40s of its /start (watch job)"


def watched(name: str = "w") -> JobSpec:
    """A minutely watch job whose runs last at most 40 s; a missing ping is late after 30 s."""
    return JobSpec.build(name, "* * * * *", None, watch=True, timeout="40s", late_after="30s")


async def run_rows(settings: ClusterSettings, name: str = "w") -> list[dict[str, object]]:
    return await sql(
        settings,
        "SELECT scheduled_for, status, started_at, finished_at, duration_s, last_error, output"
        " FROM runs WHERE job_name = %s ORDER BY scheduled_for",
        (name,),
    )


async def timed_out(alerts: AlertStore, seconds: float) -> list[tuple[str, object]]:
    return [(r.job_name, r.slot) for r in await alerts.watch_timeouts(now=at(seconds))]


async def test_a_watch_run_without_its_end_ping_times_out_once_with_a_failed_alert(
    store: JobStore, settings: ClusterSettings
) -> None:
    await store.definitions.add(watched(), now=T0)
    token = await store.watch.token("w")
    await add_rule(settings, "ops", HOOK, events="failed")
    await store.watch.ping(token, "start", now=at(61))  # slot 60, running; ends by 101 s
    async with (
        AlertStore.open(settings, "n8/alerts") as one,
        AlertStore.open(settings, "n9/alerts") as other,
    ):
        assert await timed_out(one, 100) == []
        assert (await run_rows(settings))[0]["status"] == "running"
        # Two nodes' late passes at the same instant: one of them closes it.
        found = await asyncio.gather(timed_out(one, 102), timed_out(other, 102))
        assert sorted(found, key=len) == [[], [("w", at(60))]]
        assert await timed_out(other, 110) == []
    (row,) = await run_rows(settings)
    assert (row["status"], row["started_at"], row["finished_at"], row["duration_s"]) == (
        "timed_out", at(61), at(101), 40.0
    )  # fmt: skip
    assert row["last_error"] == TIMED_OUT
    assert [(e["event"], e["slot"], e["error"]) for e in await events(settings)] == [
        ("failed", at(60), TIMED_OUT)
    ]
    assert [r.slot for r in await store.runs(job="w", tenant="default", status="running")] == []


async def test_the_nodes_late_pass_closes_every_watch_run_past_its_timeout(
    store: JobStore, settings: ClusterSettings
) -> None:
    await store.definitions.add(watched(), now=T0)
    token = await store.watch.token("w")
    await store.watch.ping(token, "start", now=at(61))
    await store.watch.ping(token, "start", now=at(121))  # the next slot's run opens too
    async with AlertStore.open(settings, "n9/alerts") as alerts:
        await LatePass(alerts, SHARDS, Stats()).run_once(now=at(165))
    statuses = [(r["scheduled_for"], r["status"]) for r in await run_rows(settings)]
    assert statuses == [(at(60), "timed_out"), (at(120), "timed_out")]


async def test_a_late_end_ping_is_noted_on_its_timed_out_run_not_filed_as_a_new_slot(
    store: JobStore, settings: ClusterSettings
) -> None:
    await store.definitions.add(watched(), now=T0)
    token = await store.watch.token("w")
    await add_rule(settings, "ops", HOOK, events="failed,late")
    await store.watch.ping(token, "start", now=at(61))
    async with AlertStore.open(settings, "n9/alerts") as alerts:
        assert await timed_out(alerts, 102) == [("w", at(60))]
        ping = await store.watch.ping(token, "success", b"done at last\n", now=at(130))
        assert ping is not None and (ping.outcome, ping.slot) == ("late", at(60))
        assert await timed_out(alerts, 140) == []
    (row,) = await run_rows(settings)  # no run for slot 120: the job still awaits a ping
    assert (row["status"], row["finished_at"], row["duration_s"]) == ("timed_out", at(101), 40.0)
    assert row["last_error"] == (f"{TIMED_OUT}; its end ping (success) came 69s after its /start")
    assert row["output"] == {"stdout": "done at last\n"}
    assert (await store.get("w")).slot_at == at(120)
    # The next end ping is an ordinary one again: the late one closed what /start opened.
    ping = await store.watch.ping(token, "success", now=at(125 + 60))
    assert ping is not None and (ping.outcome, ping.slot) == ("recorded", at(180))
    assert [(e["event"], e["slot"]) for e in await events(settings)] == [("failed", at(60))]


async def test_an_end_ping_past_the_timeout_closes_the_run_itself_when_no_pass_ran(
    store: JobStore, settings: ClusterSettings
) -> None:
    await store.definitions.add(watched(), now=T0)
    token = await store.watch.token("w")
    await add_rule(settings, "ops", HOOK, events="failed")
    await store.watch.ping(token, "start", now=at(61))
    ping = await store.watch.ping(token, "fail", b"exit 3", now=at(119))  # no node lived meanwhile
    assert ping is not None and (ping.outcome, ping.slot) == ("late", at(60))
    (row,) = await run_rows(settings)
    assert (row["status"], row["finished_at"]) == ("timed_out", at(101))
    assert row["last_error"] == f"{TIMED_OUT}; its end ping (fail) came 58s after its /start"
    async with AlertStore.open(settings, "n9/alerts") as alerts:
        assert await timed_out(alerts, 150) == []
    assert [(e["event"], e["slot"]) for e in await events(settings)] == [("failed", at(60))]


async def test_an_end_ping_in_time_still_ends_its_run(
    store: JobStore, settings: ClusterSettings
) -> None:
    await store.definitions.add(watched(), now=T0)
    token = await store.watch.token("w")
    await store.watch.ping(token, "start", now=at(61))
    ping = await store.watch.ping(token, "success", b"ok", now=at(100))
    assert ping is not None and (ping.outcome, ping.slot) == ("recorded", at(60))
    async with AlertStore.open(settings, "n9/alerts") as alerts:
        assert await timed_out(alerts, 200) == []
    (row,) = await run_rows(settings)
    assert (row["status"], row["duration_s"], row["last_error"]) == ("succeeded", 39.0, None)


async def test_runs_cancel_ends_a_watch_run_and_a_late_end_is_noted(
    store: JobStore, settings: ClusterSettings, logins: Logins
) -> None:
    await store.definitions.add(watched(), now=T0)
    await store.definitions.add(watched("quiet"), now=T0)
    token = await store.watch.token("w")
    with pytest.raises(NotRunning, match="no job 'w'"):
        await store.runcontrol.cancel("w", by="ops")
    await store.watch.ping(token, "start", now=at(61))
    await store.watch.ping(token, "start", now=at(121))  # a second run, before the first ended
    with pytest.raises(InvalidInput, match="2 slots of 'w' are running"):
        await store.runcontrol.cancel("w", by="ops")
    (asked,) = await store.runcontrol.cancel("w", by="ops", slot=at(60))
    assert (asked.slot, asked.attempt, asked.node_id, asked.watched) == (at(60), 1, None, True)
    # The web's role writes no run itself: it cancels through the same function.
    await asyncio.to_thread(grant_roles, settings, logins)
    async with JobStore.open(logins.as_web(settings)) as as_web:
        (asked,) = await as_web.runcontrol.cancel("w", by="token ci")
        assert asked.slot == at(120)
        with pytest.raises(NotRunning):
            await as_web.runcontrol.cancel("quiet", by="token ci")
        ping = await as_web.watch.ping(token, "success", now=at(150))  # through watch_end
        assert ping is not None and (ping.outcome, ping.slot) == ("late", at(120))
    rows = await run_rows(settings)
    assert [(r["status"], r["last_error"]) for r in rows] == [
        ("cancelled", "cancelled by ops (a watched run: Pulse does not stop its process)"),
        (
            "cancelled",
            "cancelled by token ci (a watched run: Pulse does not stop its process)"
            "; its end ping (success) came 29s after its /start",
        ),
    ]
    assert all(r["finished_at"] is not None for r in rows)
    async with AlertStore.open(settings, "n9/alerts") as alerts:
        assert await timed_out(alerts, 600) == []
    assert [r["status"] for r in await run_rows(settings)] == ["cancelled", "cancelled"]


@pytest.mark.new_schema
async def test_the_timeout_probe_reads_the_running_runs_through_their_index(
    store: JobStore, settings: ClusterSettings
) -> None:
    """Every node runs it every few seconds: it reads runs_by_status, whose `running` rows
    are watched runs alone, never the whole history."""
    await store.definitions.add(watched("busy"), now=T0)
    job = await store.get("busy")
    await sql(
        settings,
        "INSERT INTO runs (job_id, tenant_id, job_name, scheduled_for, status)"
        " SELECT %(id)s, 'default', 'busy', %(t0)s + make_interval(secs => i * 60),"
        " CASE WHEN i %% 1000 = 0 THEN 'failed' ELSE 'succeeded' END"
        " FROM generate_series(1, 20000) AS i",
        {"id": job.id, "t0": T0},
    )
    await sql(settings, "ANALYZE runs")
    params = {"now": at(600), "limit": 100}
    plan = await sql(settings, "EXPLAIN " + query("watch_timeouts").decode(), params)
    text = "\n".join(row["QUERY PLAN"] for row in plan)
    assert "runs_by_status" in text and "Seq Scan on runs" not in text, text


def test_the_cli_cancels_a_watch_run(settings: ClusterSettings, initialised: Invoke) -> None:
    async def start() -> None:
        async with JobStore.open(settings) as store:
            await store.definitions.add(watched(), now=T0)
            await store.watch.ping(await store.watch.token("w"), "start", now=at(61))

    asyncio.run(start())
    result = initialised("runs", "cancel", "w", "--by", "ops")
    assert result.exit_code == 0, result.output
    assert result.output.strip() == (
        "cancelled w (tenant default) slot 2026-01-01T00:01:00+00:00: a watched run, recorded "
        "cancelled; Pulse does not stop its process"
    )
    again = initialised("runs", "cancel", "w")
    assert again.exit_code == 1 and "is running" in again.output, again.output
