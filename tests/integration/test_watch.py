"""Watch jobs against a real Postgres (cluster/store/housekeeping/watches.py): never claimed, pings
matched to slots and written as runs, a missing ping raised `late` once per slot by the
late pass, tokens kept as hashes, adoption at a slot boundary and double runs. Explicit
``now`` throughout; the HTTP side is tests/e2e/test_watch_e2e.py."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from psycopg import sql as pgsql

from cluster.errors import InvalidInput
from cluster.jobs.files import load_specs
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.connect import connect
from cluster.store.housekeeping.alerts import AlertStore
from cluster.store.housekeeping.watches import token_hash
from cluster.store.jobstore.store import JobStore
from cluster.store.queries import query
from ring.zones import WATCH_SHARD
from tests.helpers.outbox import ALL, HANDLER, T0, add_rule, at, events, run_slot, sql
from tests.helpers.roles import Logins, grant_roles, refused
from tests.helpers.sessions import Opener

pytestmark = pytest.mark.timeout(60)
HOOK = "http://127.0.0.1:9/hook"
SHARDS = 16


def minutely(name: str, **kw: object) -> JobSpec:
    return JobSpec.build(name, "* * * * *", kw.pop("handler", None), watch=True, **kw)  # type: ignore[arg-type]


async def runs_of(settings: ClusterSettings, name: str) -> list[tuple[object, ...]]:
    rows = await sql(
        settings,
        "SELECT scheduled_for, status, duration_s, output, node_id, origin FROM runs"
        " WHERE job_name = %s ORDER BY scheduled_for",
        (name,),
    )
    return [
        (r["scheduled_for"], r["status"], r["duration_s"], r["output"], r["node_id"], r["origin"])
        for r in rows
    ]


async def missed(alerts: AlertStore, seconds: float) -> list[str]:
    return [job.name for job in await alerts.watch_pass(SHARDS, now=at(seconds))]


async def test_a_watch_job_is_never_claimed(store: JobStore, open_session: Opener) -> None:
    await store.definitions.apply([minutely("w"), JobSpec.build("r", "* * * * *", HANDLER)], now=T0)
    job = await store.get("w")
    assert (job.watch, job.shard, job.handler) == (True, WATCH_SHARD, "")
    node = await open_session("n1")
    claimed = (await node.claim(ALL, 50, 30.0, now=at(600))).jobs
    assert [c.name for c in claimed] == ["r"]
    # Even a session holding the watch shard by mistake finds nothing due there but pings'.
    assert (await store.get("w")).status == "idle"


async def test_pings_are_written_as_runs_of_the_slots_they_belong_to(
    store: JobStore, settings: ClusterSettings
) -> None:
    await store.definitions.add(minutely("w"), now=T0)
    token = await store.watch.token("w")
    ping = await store.watch.ping(token, "success", b"rows: 42\n", now=at(62))
    assert ping is not None and (ping.outcome, ping.slot) == ("recorded", at(60))
    assert (await store.get("w")).slot_at == at(120)  # it awaits the next slot
    # /start, then the end: the duration; /start a little early belongs to the coming slot.
    await store.watch.ping(token, "start", now=at(118))
    await store.watch.ping(token, "success", now=at(118 + 95))  # a run longer than the period
    await store.watch.ping(token, "fail", b"exit 3", now=at(241))
    assert await runs_of(settings, "w") == [
        (at(60), "succeeded", None, {"stdout": "rows: 42\n"}, None, "ping"),
        (at(120), "succeeded", 95.0, None, None, "ping"),
        (at(240), "failed", None, {"stdout": "exit 3"}, None, "ping"),
    ]
    # Slot 180 had no ping: the job still awaits it, for the late pass to declare missed.
    assert (await store.get("w")).slot_at == at(180)


async def test_an_unknown_or_malformed_token_writes_nothing(
    store: JobStore, settings: ClusterSettings
) -> None:
    await store.definitions.add(minutely("w"), now=T0)
    await store.watch.token("w")
    for guess in ("x" * 43, "", "../../etc", "\udcff" * 5, "w", str((await store.get("w")).id)):
        assert await store.watch.ping(guess, "success", b"x", now=at(61)) is None
    assert await runs_of(settings, "w") == []


async def test_a_token_is_kept_as_a_hash_shown_once_and_rotated(
    store: JobStore, settings: ClusterSettings
) -> None:
    await store.definitions.add(minutely("w"), now=T0)
    await store.definitions.add(JobSpec.build("r", "* * * * *", HANDLER), now=T0)
    token = await store.watch.token("w")
    (row,) = await sql(settings, "SELECT ping_hash FROM jobs WHERE name = 'w'")
    assert bytes(row["ping_hash"]) == token_hash(token) and token.encode() not in row["ping_hash"]
    with pytest.raises(InvalidInput, match="rotate"):
        await store.watch.token("w")
    with pytest.raises(InvalidInput, match="not a watch job"):
        await store.watch.token("r")
    rotated = await store.watch.token("w", rotate=True)
    assert await store.watch.ping(token, "success", now=at(61)) is None
    assert await store.watch.ping(rotated, "success", now=at(61)) is not None


async def test_a_missing_ping_raises_late_once_per_slot_and_a_late_one_is_kept(
    store: JobStore, settings: ClusterSettings
) -> None:
    await store.definitions.add(minutely("w", late_after="30s"), now=T0)
    token = await store.watch.token("w")
    await add_rule(settings, "ops", HOOK, events="late")
    async with AlertStore.open(settings, "n9/alerts") as alerts:
        assert await missed(alerts, 89) == []  # due at 60 s: 29 s is not late yet
        assert await missed(alerts, 91) == ["w"]
        assert await missed(alerts, 95) == []  # the same slot: once
        assert (await store.get("w")).slot_at == at(120)
        # The late ping is noted on its slot's record, which stays failed (below).
        await store.watch.ping(token, "success", b"sorry", now=at(100))
        await store.watch.ping(token, "success", now=at(121))  # slot 120 on time
        assert await missed(alerts, 160) == []
        assert await missed(alerts, 240) == ["w"]  # slot 180 missed; 240 not yet late
    assert [(e["event"], e["slot"]) for e in await events(settings)] == [
        ("late", at(60)),
        ("late", at(180)),
    ]
    history = await runs_of(settings, "w")
    assert [(r[0], r[1]) for r in history] == [
        (at(60), "failed"),
        (at(120), "succeeded"),
        (at(180), "failed"),
    ]


async def test_a_ping_after_its_slot_was_declared_missed_never_overwrites_the_record(
    store: JobStore, settings: ClusterSettings
) -> None:
    """Issue 50: a late ping replaced the `failed` (missed) record of its slot. A terminal
    record stays; the ping is noted on it and answers `late`."""
    await store.definitions.add(minutely("w", late_after="30s"), now=T0)
    token = await store.watch.token("w")
    async with AlertStore.open(settings, "n9/alerts") as alerts:
        assert await missed(alerts, 91) == ["w"]
    for kind, seconds in (("success", 100), ("start", 101), ("fail", 102)):
        ping = await store.watch.ping(
            token, kind, b"sorry" if kind == "success" else b"", now=at(seconds)
        )
        assert ping is not None and (ping.outcome, ping.slot) == ("late", at(60))
    (row,) = await sql(
        settings, "SELECT status, finished_at, last_error, output FROM runs WHERE job_name = 'w'"
    )
    assert (row["status"], row["finished_at"], row["output"]) == (
        "failed", at(91), {"stdout": "sorry"}
    )  # fmt: skip
    assert row["last_error"] == (
        "no ping within 30s of the slot (watch job); a success ping came 40s after its slot; "
        "a start ping came 41s after its slot; a fail ping came 42s after its slot"
    )
    assert (await store.get("w")).slot_at == at(120)  # the job moved on when it was missed


async def test_a_paused_watch_job_is_never_late(store: JobStore, settings: ClusterSettings) -> None:
    await store.definitions.add(minutely("w", late_after="30s"), now=T0)
    await store.pause("w", now=T0)
    async with AlertStore.open(settings, "n9/alerts") as alerts:
        assert await missed(alerts, 600) == []


async def test_adoption_hands_the_job_to_the_nodes_at_its_slot_and_counts_double_runs(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await store.definitions.add(minutely("w"), now=T0)
    token = await store.watch.token("w")
    await store.watch.ping(token, "success", now=at(61))
    with pytest.raises(InvalidInput, match="handler"):
        await store.watch.adopt("w", at=at(180), now=at(70))
    with pytest.raises(InvalidInput, match="not a slot"):
        await store.watch.adopt("w", at=at(170), handler=HANDLER, now=at(70))
    with pytest.raises(InvalidInput, match="future"):
        await store.watch.adopt("w", at=at(120), handler=HANDLER, now=at(130))
    job = await store.watch.adopt("w", at=at(180), handler=HANDLER, now=at(70))
    assert (job.watch, job.shard, job.adopt_at, job.handler) == (
        True,
        WATCH_SHARD,
        at(180),
        HANDLER,
    )
    node = await open_session("n1")
    assert (await node.claim(ALL, 50, 30.0, now=at(150))).jobs == []
    # The last watched slot's ping hands the job over: due at 180 s in its home shard.
    await store.watch.ping(token, "success", now=at(121))
    job = await store.get("w")
    assert (job.watch, job.next_run_at, job.shard < SHARDS) == (False, at(180), True)
    assert [c.name for c in await run_slot(node, at(180))] == ["w"]
    # The legacy cron still runs: its ping for 180 s is a double run, not a second run row.
    await add_rule(settings, "ops", HOOK, events="double_run")
    ping = await store.watch.ping(token, "success", b"legacy", now=at(182))
    assert ping is not None and (ping.outcome, ping.slot) == ("double_run", at(180))
    assert [(d["slot"], d["kind"]) for d in await store.watch.double_runs("w")] == [
        (at(180), "success")
    ]
    assert [(e["event"], e["slot"]) for e in await events(settings)] == [("double_run", at(180))]
    history = await runs_of(settings, "w")
    assert [(r[0], r[1], r[4]) for r in history] == [
        (at(60), "succeeded", None),
        (at(120), "succeeded", None),
        (at(180), "succeeded", "n1"),
    ]


async def test_adopting_at_the_awaited_slot_hands_it_over_at_once(
    store: JobStore, open_session: Opener
) -> None:
    await store.definitions.add(minutely("w", handler=HANDLER), now=T0)
    job = await store.watch.adopt("w", at=at(60), now=at(10))
    assert (job.watch, job.next_run_at) == (False, at(60))
    node = await open_session("n1")
    assert [c.name for c in await run_slot(node, at(60))] == ["w"]


async def test_a_missed_last_watched_slot_hands_over_too(
    store: JobStore, settings: ClusterSettings
) -> None:
    await store.definitions.add(minutely("w", handler=HANDLER, late_after="20s"), now=T0)
    await store.watch.adopt("w", at=at(120), now=at(10))
    async with AlertStore.open(settings, "n9/alerts") as alerts:
        assert await missed(alerts, 81) == ["w"]
    job = await store.get("w")
    assert (job.watch, job.next_run_at) == (False, at(120))


async def test_a_job_file_entry_with_watch_true(store: JobStore, tmp_path: Path) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text(
        "jobs:\n"
        "  - name: backup\n"
        "    schedule: '30 2 * * *'\n"
        "    tz: Europe/Berlin\n"
        "    watch: true\n"
        "    handler: 'shell:/usr/local/bin/backup'\n"
    )
    result = await store.definitions.apply(load_specs(str(path)), now=T0)
    assert result.created == ["backup"]
    job = await store.get("backup")
    assert (job.watch, job.shard, job.handler) == (True, WATCH_SHARD, "shell:/usr/local/bin/backup")
    assert (await store.definitions.apply(load_specs(str(path)), now=T0)).unchanged == ["backup"]
    path.write_text(path.read_text().replace("    watch: true\n", ""))
    with pytest.raises(InvalidInput, match="jobs adopt"):
        await store.definitions.apply(load_specs(str(path)), now=T0)
    assert (await store.get("backup")).watch


async def test_bad_watch_definitions_are_refused(store: JobStore) -> None:
    await store.definitions.add(JobSpec.build("r", "* * * * *", HANDLER), now=T0)
    with pytest.raises(InvalidInput, match="exists as a job Pulse runs"):
        await store.definitions.apply([minutely("r")], now=T0)
    for kw, field in (
        ({"zones": "a"}, "watch"),
        ({"overlap": "allow"}, "watch"),
    ):
        with pytest.raises(InvalidInput) as caught:
            minutely("x", **kw)
        assert caught.value.field == field
    with pytest.raises(InvalidInput, match="one-off"):
        JobSpec.build("x", "@at 2030-01-01T00:00:00Z", None, watch=True)
    assert [j.name for j in await store.jobs()] == ["r"]


async def test_the_status_backlog_leaves_watch_jobs_out(
    store: JobStore, settings: ClusterSettings
) -> None:
    await store.definitions.add(minutely("w"), now=T0)
    await store.definitions.add(JobSpec.build("r", "* * * * *", HANDLER), now=T0)
    conn = await connect(settings, "observer")
    try:
        cur = await conn.execute(query("status_backlog"), {"now": at(600)})
        (row,) = await cur.fetchall()
    finally:
        await conn.close()
    assert row["due"] == 1  # r only: w awaits a ping, no node runs it


async def test_a_job_behind_by_several_slots_catches_up_in_one_pass(
    store: JobStore, settings: ClusterSettings
) -> None:
    await store.definitions.add(minutely("w", late_after="30s"), now=T0)
    token = await store.watch.token("w")
    await store.watch.ping(token, "success", now=at(181))  # slot 180 pinged, 60 and 120 not
    await add_rule(settings, "ops", HOOK, events="late")
    async with AlertStore.open(settings, "n9/alerts") as alerts:
        found = await alerts.watch_pass(SHARDS, now=at(400))
        assert [j.slot_at for j in found] == [at(60), at(120), at(240), at(300), at(360)]
        assert (await store.get("w")).slot_at == at(420)
        assert await missed(alerts, 410) == []
    assert [e["slot"] for e in await events(settings)] == [
        at(60), at(120), at(240), at(300), at(360)
    ]  # fmt: skip


async def test_a_ping_past_its_late_window_before_the_pass_raises_late_once(
    store: JobStore, settings: ClusterSettings
) -> None:
    await store.definitions.add(minutely("w", late_after="30s"), now=T0)
    token = await store.watch.token("w")
    await add_rule(settings, "ops", HOOK, events="late")
    await store.watch.ping(token, "success", now=at(100))  # 40 s after slot 60, no pass ran
    async with AlertStore.open(settings, "n9/alerts") as alerts:
        assert await missed(alerts, 105) == []
    assert [(e["event"], e["slot"], e["detail"]) for e in await events(settings)] == [
        ("late", at(60), "pinged 40s after it was due (late after 30s)")
    ]


@pytest.mark.parametrize("move", ["resume", "pause-until", "skip-next", "new-timing"])
async def test_a_watch_job_moved_past_its_adoption_slot_is_handed_over_at_its_slot(
    store: JobStore, settings: ClusterSettings, open_session: Opener, move: str
) -> None:
    """An operator's action that moves the awaited slot past the adoption slot leaves the
    job watched; the late pass hands it over as its slot comes, not ``late_after`` later:
    before, the first slot Pulse ran started that late (a ``late`` alert at the default
    minute, or skipped by a catch-up whose grace is shorter)."""
    late = "10m" if move != "new-timing" else "20s"
    await store.definitions.add(minutely("w", handler=HANDLER, late_after=late), now=T0)
    await store.watch.adopt("w", at=at(180), now=at(10))
    if move == "resume":
        await store.pause("w", now=at(20))
        await store.resume("w", now=at(250))  # awaits 300 s, past the adoption slot
    elif move == "pause-until":
        await store.holds.pause_until("w", "default", at(250), now=at(20))
    elif move == "skip-next":
        await store.holds.skip_next("w", "default", 4, now=at(20))  # 60 s to 240 s
    else:
        await store.definitions.apply(
            [JobSpec.build("w", "*/5 * * * *", HANDLER, watch=True, late_after="20s")],
            now=at(20),
        )
    job = await store.get("w")
    assert (job.watch, job.slot_at) == (True, at(300))
    async with AlertStore.open(settings, "n9/alerts") as alerts:
        assert await missed(alerts, 299) == []
        assert (await store.get("w")).watch  # not before its slot
        assert await missed(alerts, 301) == []
    job = await store.get("w")
    assert (job.watch, job.next_run_at, job.shard < SHARDS) == (False, at(300), True)
    node = await open_session("n1")
    assert [(c.name, c.slot) for c in await run_slot(node, at(301))] == [("w", at(300))]
    history = await runs_of(settings, "w")
    assert history[-1][:2] == (at(300), "succeeded")
    assert "late" not in [e["event"] for e in await events(settings)]


@pytest.mark.parametrize("move", ["new-timing", "pause", "pause-until"])
async def test_a_watch_jobs_due_slots_are_recorded_when_an_operator_moves_it_past_them(
    store: JobStore, settings: ClusterSettings, move: str
) -> None:
    """Slots due that no ping came for and the late pass has not declared missed yet (its
    late_after not over, or no node up): an apply of a new timing, a pause or a
    ``pause --until`` moves the job past them. Before, they were left without a record,
    as only run jobs' owed slots were recorded."""
    await store.definitions.add(minutely("w", late_after="10m"), now=T0)
    why = await move_w(store, move, "10m", at(200))  # 60, 120 and 180 s are due, unpinged
    history = await runs_of(settings, "w")
    assert [(r[0], r[1]) for r in history] == [(at(s), "skipped") for s in (60, 120, 180)]
    reasons = await sql(settings, "SELECT DISTINCT last_error FROM runs WHERE job_name = 'w'")
    assert [r["last_error"] for r in reasons] == [why]


async def move_w(store: JobStore, move: str, late_after: str, now: datetime) -> str:
    """Move the watch job ``w`` on from its slot by ``move`` at ``now``; the reason the
    slots it passes are recorded skipped with (skip-next: one slot)."""
    if move == "new-timing":
        spec = JobSpec.build("w", "*/5 * * * *", None, watch=True, late_after=late_after)
        await store.definitions.apply([spec], now=now)
        return "skipped by pulse jobs apply: a new timing moved the job past it before it ran"
    if move == "pause":
        await store.pause("w", now=now)
        return "skipped by pulse jobs pause: paused before it ran"
    if move == "pause-until":
        await store.holds.pause_until("w", "default", at(400), now=now)
        return "skipped by pulse jobs pause --until: paused before it ran"
    await store.holds.skip_next("w", "default", 1, now=now)
    return "skipped by pulse jobs skip-next"


LATE = "no ping within 90s of the slot (watch job)"


@pytest.mark.parametrize("move", ["new-timing", "pause", "pause-until", "skip-next"])
async def test_slots_past_late_after_are_declared_missed_by_the_action_that_moves_the_job(
    store: JobStore, settings: ClusterSettings, move: str
) -> None:
    """No node has run the late pass since the job's slot at 60 s went 90 s without a ping
    (its late_after); an operator's action then moves the job past it. It was recorded
    skipped by the action, hiding the missed ping; it is declared missed as the late pass
    would (a failed run, one ``late`` event), and only the slots still within late_after
    are the action's."""
    await store.definitions.add(minutely("w", late_after="90s"), now=T0)
    await add_rule(settings, "ops", HOOK, events="late")
    # At 200 s, 60 s is late; 120 s and 180 s are due, within late_after.
    why = await move_w(store, move, "90s", at(200))
    passed = [120] if move == "skip-next" else [120, 180]  # skip-next: the slot after 60 s
    history = await sql(
        settings,
        "SELECT scheduled_for, status, last_error, origin FROM runs WHERE job_name = 'w'"
        " ORDER BY scheduled_for",
    )
    assert [(r["scheduled_for"], r["status"], r["last_error"], r["origin"]) for r in history] == [
        (at(60), "failed", LATE, "ping"),
        *[(at(s), "skipped", why, None) for s in passed],
    ]
    assert [(e["event"], e["slot"]) for e in await events(settings)] == [("late", at(60))]
    async with AlertStore.open(settings, "n9/alerts") as alerts:
        later = await missed(alerts, 300)  # 180 s is late by now, if the job awaits it
    assert later == (["w"] if move == "skip-next" else [])
    assert [e["slot"] for e in await events(settings)] == [at(60)] + [at(180)] * len(later)


async def test_more_late_slots_than_one_call_takes_are_all_declared_missed(
    store: JobStore, settings: ClusterSettings
) -> None:
    """A watch job no node watched for a day (1,439 minutes late by the pause): before,
    the oldest 1,000 were declared missed and the rest recorded skipped by the pause,
    though no ping came for them either. Every late one is declared missed, in calls of
    at most 1,000 slots, and only those still within late_after are the pause's."""
    await store.definitions.add(minutely("w", late_after="90s"), now=T0)
    now = at(24 * 3600 + 45)  # 1,440 slots due; the last within its 90 s
    await store.pause("w", now=now)
    rows = await sql(
        settings,
        "SELECT status, count(*) AS n, min(scheduled_for) AS first, max(scheduled_for) AS last"
        " FROM runs WHERE job_name = 'w' GROUP BY status ORDER BY status",
    )
    assert [(r["status"], r["n"], r["first"], r["last"]) for r in rows] == [
        ("failed", 1439, at(60), at(1439 * 60)),
        ("skipped", 1, at(1440 * 60), at(1440 * 60)),
    ]


async def test_a_web_pause_declares_late_slots_missed_and_the_function_takes_no_other(
    store: JobStore, settings: ClusterSettings, logins: Logins
) -> None:
    """The web's role writes no runs and raises no alerts: its pause, and its apply of a
    new timing (recorded before the apply moves the job), declare the late slot missed
    through ``watch_declare_missed``, as the owner. Called directly, that
    function writes nothing for another tenant's job, a job that is not watched, a slot
    before the job's own, one not late by the database's clock, or one already recorded."""
    await store.definitions.apply(
        [
            minutely("w", late_after="90s", tenant="acme"),
            minutely("v", late_after="90s", tenant="acme"),
            minutely("x", late_after="90s", tenant="acme"),
            JobSpec.build("r", "* * * * *", HANDLER, tenant="acme"),
        ],
        now=T0,
    )
    await add_rule(settings, "ops", HOOK, events="late")
    await asyncio.to_thread(grant_roles, settings, logins)
    async with JobStore.open(logins.as_web(settings)) as as_web:
        await as_web.pause("w", "acme", now=at(200))
        # A new timing, recorded before the apply moves the job (the web's way).
        spec = JobSpec.build("x", "*/5 * * * *", None, watch=True, late_after="90s", tenant="acme")
        await as_web.definitions.apply([spec], now=at(200))
    for name in ("w", "x"):
        history = await sql(
            settings, "SELECT scheduled_for, status FROM runs WHERE job_name = %s", (name,)
        )
        assert sorted((r["scheduled_for"], r["status"]) for r in history) == [
            (at(60), "failed"), (at(120), "skipped"), (at(180), "skipped"),
        ], name  # fmt: skip
    assert sorted((e["job_name"], e["slot"]) for e in await events(settings)) == [
        ("w", at(60)), ("x", at(60)),
    ]  # fmt: skip
    assert (await store.get("x", "acme")).slot_at == at(300)
    v, r, w = [await store.get(name, "acme") for name in ("v", "r", "w")]
    (clock,) = await sql(settings, "SELECT now() AS now")
    web = logins.as_web(settings)

    def declare(job: object, scope: str, slot: object, owner: bool = False) -> list[object]:
        url = settings.database_url if owner else web.database_url
        with psycopg.connect(url, autocommit=True) as conn:
            path = pgsql.SQL("SET search_path TO {}").format(pgsql.Identifier(settings.schema))
            conn.execute(path)
            found = conn.execute(
                "SELECT * FROM watch_declare_missed(%s, %s, ARRAY[%s]::timestamptz[], %s)",
                (job, scope, slot, at(1000)),
            ).fetchall()
        return [row[0] for row in found]

    late = at(300)  # v awaits 60 s: a slot after it, late by now()
    assert await asyncio.to_thread(declare, v.id, "other", late) == []
    assert await asyncio.to_thread(declare, r.id, "acme", late) == []
    assert await asyncio.to_thread(declare, v.id, "acme", at(0)) == []  # before its slot
    ahead = clock["now"] + timedelta(minutes=1)  # the caller's `now` is not taken
    assert await asyncio.to_thread(declare, v.id, "acme", ahead) == []
    # Not even the owner's call overwrites a record (w's 120 s, skipped by its pause).
    assert await asyncio.to_thread(declare, w.id, "acme", at(120), True) == []
    assert len(await events(settings)) == 2
    assert await sql(settings, "SELECT scheduled_for FROM runs WHERE job_name = 'v'") == []
    assert await asyncio.to_thread(declare, v.id, "acme", late) == [late]
    history = await sql(settings, "SELECT scheduled_for, status FROM runs WHERE job_name = 'w'")
    assert sorted((r["scheduled_for"], r["status"]) for r in history)[1] == (at(120), "skipped")


async def test_the_web_role_writes_a_pings_run_only_through_watch_record(
    store: JobStore, settings: ClusterSettings, logins: Logins
) -> None:
    await store.definitions.add(minutely("w"), now=T0)
    token = await store.watch.token("w")
    await add_rule(settings, "ops", HOOK, events="double_run")
    await asyncio.to_thread(grant_roles, settings, logins)
    async with JobStore.open(logins.as_web(settings)) as as_web:
        assert (await as_web.watch.ping(token, "success", b"ok", now=at(61))) is not None
        await as_web.watch.adopt("w", at=at(180), handler=HANDLER, now=at(62))
        ping = await as_web.watch.ping(token, "success", now=at(181))
    assert ping is not None and ping.outcome == "double_run"
    assert [(r[0], r[1]) for r in await runs_of(settings, "w")] == [(at(60), "succeeded")]
    assert [e["event"] for e in await events(settings)] == ["double_run"]
    # Yet the role still cannot write a run itself.
    web = logins.as_web(settings)
    statement = (
        "INSERT INTO runs (job_id, tenant_id, job_name, scheduled_for, status)"
        " VALUES (gen_random_uuid(), 'a', 'x', now(), 'succeeded')"
    )
    assert (
        await asyncio.to_thread(refused, web.database_url, settings.schema, statement)
        == "InsufficientPrivilege"
    )
