"""``pulse audit`` against job histories built with the node's own claim, completion and
recovery statements and an explicit clock (T0 on): runs, retries, skips, a re-run after a
node's death, a slot the job moved past without a record, an overwritten record, a job
edited and paused mid-range, paused until a time (and resumed before it), slots whose
records retention may have pruned, and bad input (docs/design/audit.md)."""

from __future__ import annotations

import asyncio
import csv
import io
import json
from contextlib import aclosing
from datetime import timedelta
from typing import Any

import pytest

from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from cluster.store.lock.records import ClaimedJob, Completion
from cluster.store.lock.session import LockSession
from cluster.store.observe import audit as audit_store
from cluster.store.observe.audit import BATCH, Scope, audit_lines
from tests.helpers.cli import invoke, keep_runs_for_ever
from tests.helpers.examples import documented
from tests.helpers.history import add, every_10s, finish, rows
from tests.helpers.sessions import ALL, T0, Opener, at

RANGE = ("--from", T0.isoformat(), "--to", at(60).isoformat())
REVISED = "UPDATE job_revisions SET at = %s WHERE revision = %s RETURNING 1"


def documented_example() -> str:
    """The output docs/guarantees.md shows for the job of the test below."""
    return "\n".join(documented("docs/guarantees.md#slots")) + "\n"


async def made_at_t0(settings: ClusterSettings) -> None:
    """Revisions are stamped by the database's clock; these jobs were made at T0."""
    await rows(settings, "UPDATE job_revisions SET at = %s RETURNING 1", (T0,))


async def audit(settings: ClusterSettings, *args: str) -> tuple[int, list[dict[str, Any]]]:
    """``pulse audit --json`` over the range, the cluster keeping its runs for ever: its
    exit code and its JSON lines."""
    await asyncio.to_thread(keep_runs_for_ever, settings)
    result = await asyncio.to_thread(invoke, settings, "audit", *RANGE, "--json", *args)
    assert result.exit_code in (0, 1), result.output
    return result.exit_code, [json.loads(line) for line in result.stdout.splitlines()]


def verdicts(lines: list[dict[str, Any]], job: str) -> list[tuple[str, str]]:
    return [
        (line["slot"], line["verdict"])
        for line in lines
        if line["type"] == "slot" and line["job"] == job
    ]


async def test_every_slot_ran_or_was_skipped_exits_0(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await add(store, every_10s("steady"))
    await made_at_t0(settings)
    node = await open_session("n1", "za")
    for second in range(10, 60, 10):
        (job,) = (await node.claim(ALL, 10, 30.0, now=at(second))).jobs
        outcome = "skipped" if second == 30 else "succeeded"
        error = "nothing to do" if outcome == "skipped" else None
        await node.completions.complete([finish(job, outcome, error=error)], now=at(second + 1))

    code, lines = await audit(settings)
    assert code == 0
    assert verdicts(lines, "steady") == [
        (at(s).isoformat(), "skipped" if s == 30 else "ran") for s in range(10, 60, 10)
    ]
    ran = next(line for line in lines if line["type"] == "slot")
    assert (ran["outcome"], ran["node"], ran["attempts"], ran["token"]) == (
        "succeeded", "n1", 1, ran["token"]
    )  # fmt: skip
    assert isinstance(ran["token"], int)
    skipped = [line for line in lines if line.get("verdict") == "skipped"]
    assert [s["detail"] for s in skipped] == ["nothing to do"]
    (summary,) = [line for line in lines if line["type"] == "summary"]
    assert summary["total"]["ran"] == 4 and summary["total"]["missing"] == 0


async def test_retries_and_a_rerun_after_a_node_death_are_named(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await add(store, every_10s("flaky", retries=2))
    await made_at_t0(settings)
    first, heir = await open_session("n1", "za"), await open_session("n2", "zb")
    (job,) = (await first.claim(ALL, 10, 30.0, now=at(10))).jobs
    await first.completions.complete(
        [finish(job, "failed", error="boom", retry_at=at(12))], now=at(11)
    )
    (job,) = (await first.claim(ALL, 10, 30.0, now=at(12))).jobs
    # n1 dies in attempt 2: its lease runs out, n2 takes the slot back and runs it again.
    assert len(await heir.recover(ALL, ["n2"], now=at(43))) == 1
    (again,) = (await heir.claim(ALL, 10, 30.0, now=at(43))).jobs
    assert (again.slot, again.attempt) == (at(10), 3)
    await heir.completions.complete([finish(again)], now=at(44))

    _, lines = await audit(settings, "--job", "flaky")
    line = next(x for x in lines if x["type"] == "slot" and x["slot"] == at(10).isoformat())
    assert (line["verdict"], line["outcome"], line["node"], line["attempts"]) == (
        "reran", "succeeded", "n2", 3
    )  # fmt: skip
    assert line["detail"] == (
        f"attempt 1 failed on n1 started {at(10).isoformat()}: retried; "
        f"attempt 2 lost on n1 started {at(12).isoformat()} (lease expired (node n1)): "
        f"re-run after node death; attempt 3 succeeded on n2 started {at(43).isoformat()}"
    )


async def test_a_slot_passed_without_record_is_missing_and_an_overwrite_is_found(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await add(store, every_10s("gappy"))
    await made_at_t0(settings)
    node = await open_session("n1", "za")
    (job,) = (await node.claim(ALL, 10, 30.0, now=at(10))).jobs
    # A completion that moves the job two slots on records nothing for the slot at 20 s.
    done = finish(job)._replace(next_run_at=at(30), next_slot=at(30))
    await node.completions.complete([done], now=at(11))
    skipped = await store.holds.skip_next("gappy", "default", now=at(25))
    assert skipped == [at(30)]
    (job,) = (await node.claim(ALL, 10, 30.0, now=at(40))).jobs
    await node.completions.complete([finish(job)], now=at(41))
    # The skipped record is later rewritten as a run (the defect of issue 50).
    await rows(
        settings,
        "UPDATE runs SET status = 'succeeded', last_error = NULL, finished_at = %s "
        "WHERE scheduled_for = %s RETURNING 1",
        (at(50), at(30)),
    )

    code, lines = await audit(settings, "--job", "gappy")
    assert code == 1
    assert verdicts(lines, "gappy") == [
        (at(10).isoformat(), "ran"),
        (at(20).isoformat(), "missing"),
        (at(30).isoformat(), "overwritten"),
        (at(40).isoformat(), "ran"),
        (at(50).isoformat(), "missing"),
    ]
    (over,) = [x for x in lines if x.get("verdict") == "overwritten"]
    assert over["detail"] == (
        "was skipped (skipped by pulse jobs skip-next), attempt 1, until "
        f"{at(50).isoformat()}; now succeeded, attempt 1"
    )
    # The text form: one line per slot, then the counts per job, as docs/guarantees.md shows.
    result = await asyncio.to_thread(invoke, settings, "audit", *RANGE)
    assert result.exit_code == 1
    assert result.stdout == documented_example()
    # CSV: a header, then the same slots.
    result = await asyncio.to_thread(invoke, settings, "audit", *RANGE, "--csv")
    table = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [(r["slot"], r["verdict"]) for r in table] == verdicts(lines, "gappy")


async def test_an_edit_a_pause_and_a_trigger_are_followed(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    """Each time expects the slots of the definition in force then: none while paused,
    none before the job existed; a trigger is listed, not counted as a slot."""
    await add(store, every_10s("edited"))
    node = await open_session("n1", "za")
    await rows(settings, REVISED, (at(5), 1))  # made at 5 s: the slot at 0 is not expected
    await store.pause("edited", "default")
    await rows(settings, REVISED, (at(25), 2))  # paused at 25 s
    await store.resume("edited", "default")
    await rows(settings, REVISED, (at(45), 3))  # resumed at 45 s
    await rows(
        settings,
        "INSERT INTO runs (job_id, tenant_id, job_name, scheduled_for, attempt, node_id, "
        "status, lease_token, origin) SELECT id, tenant_id, name, s, 1, 'n1', 'succeeded', 1, "
        "o FROM jobs, (VALUES (%s::timestamptz, NULL), (%s, NULL), (%s, 'trigger'), "
        "(%s, NULL)) AS v(s, o) RETURNING 1",
        (at(10), at(20), at(33), at(50)),
    )
    del node

    code, lines = await audit(settings, "--job", "edited")
    assert code == 0
    assert verdicts(lines, "edited") == [
        (at(10).isoformat(), "ran"),
        (at(20).isoformat(), "ran"),
        (at(33).isoformat(), "unaligned"),
        (at(50).isoformat(), "ran"),
    ]


async def test_an_audit_from_the_middle_counts_the_runs_before_toward_max_runs(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    """A job done after two runs (10 s, 20 s) and given a new schedule at 35 s (idle again,
    done after its run at 40 s), audited from 15 s: its run at 10 s was not read, so the
    audit took the job for one run short of done and called 30 s, of its done spell,
    missing. It counts the runs before the range that count toward max_runs."""
    await add(store, every_10s("capped", max_runs=2))
    await made_at_t0(settings)
    node = await open_session("n1", "za")
    for second in (10, 20):
        (job,) = (await node.claim(ALL, 10, 30.0, now=at(second))).jobs
        await node.completions.complete([finish(job)], now=at(second + 1))
    assert (await store.get("capped")).status == "done"
    new = JobSpec.build("capped", "@every 20s", "cluster.chaos.witness:record", max_runs=2)
    await store.definitions.apply([new], now=at(35))
    await rows(settings, REVISED, (at(35), 2))
    (job,) = (await node.claim(ALL, 10, 30.0, now=at(40))).jobs
    await node.completions.complete([finish(job)], now=at(41))
    assert (await store.get("capped")).status == "done"

    code, lines = await audit(settings, "--job", "capped", "--from", at(15).isoformat())
    assert verdicts(lines, "capped") == [(at(20).isoformat(), "ran"), (at(40).isoformat(), "ran")]
    assert code == 0


def every_minute(job: ClaimedJob) -> Completion:
    """The completion of ``job`` of an ``@every 1m`` job: its next slot a minute on."""
    following = job.slot + timedelta(minutes=1)
    return finish(job)._replace(next_run_at=following, next_slot=following)


async def run_minutes(node: LockSession, *minutes: int) -> None:
    for minute in minutes:
        (job,) = (await node.claim(ALL, 10, 30.0, now=at(60 * minute))).jobs
        assert job.slot == at(60 * minute)
        await node.completions.complete([every_minute(job)], now=at(60 * minute + 1))


async def test_slots_older_than_retention_keeps_are_pruned_not_missing(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    """A slot without a record behind the job's newest ``keep_runs`` runs, or older than its
    ``keep_for``, may have had its record pruned: `pruned`, exit 0. One without a record
    within what retention keeps is still `missing`."""
    await add(store, JobSpec.build("kept", "@every 1m", "cluster.chaos.witness:record"))
    await made_at_t0(settings)
    node = await open_session("n1", "za")
    await run_minutes(node, 1, 2, 3, 4, 5, 6, 7)
    # Pruned down to its newest 4 by count, then minute 6's record lost (no pruning did it).
    await rows(settings, "UPDATE jobs SET keep_runs = 3 RETURNING 1")
    await rows(settings, "DELETE FROM runs WHERE scheduled_for <= %s RETURNING 1", (at(180),))
    await rows(settings, "DELETE FROM runs WHERE scheduled_for = %s RETURNING 1", (at(360),))

    def audited(until: int) -> tuple[int, list[dict[str, Any]]]:
        result = invoke(
            settings, "audit", "--from", T0.isoformat(), "--to", at(until).isoformat(), "--json"
        )
        assert result.exit_code in (0, 1), result.output
        lines = [json.loads(line) for line in result.stdout.splitlines()]
        return result.exit_code, [x for x in lines if x["type"] == "slot"]

    # The cluster's keep_for (30 days) reaches past T0: by age, every record may be gone.
    code, lines = await asyncio.to_thread(audited, 480)
    assert code == 0 and {x["verdict"] for x in lines} == {"pruned", "ran"}, lines
    pruned = {x["detail"] for x in lines if x["verdict"] == "pruned"}
    assert pruned == {"no record, older than the job's retention keeps (keep_for 30d): "
                      "pruned, or never written"}  # fmt: skip

    # Kept for ever by age: the count decides. Its newest 3 runs reach back to minute 4.
    await asyncio.to_thread(keep_runs_for_ever, settings)
    code, lines = await asyncio.to_thread(audited, 480)
    assert code == 1
    assert [(x["slot"], x["verdict"]) for x in lines] == [
        (at(60).isoformat(), "pruned"),
        (at(120).isoformat(), "pruned"),
        (at(180).isoformat(), "pruned"),
        (at(240).isoformat(), "ran"),
        (at(300).isoformat(), "ran"),
        (at(360).isoformat(), "missing"),
        (at(420).isoformat(), "ran"),
    ]
    assert "(keep_runs 3)" in lines[0]["detail"]


async def test_slots_a_pause_until_passed_over_are_paused_not_missing(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    """Paused at 2m30s until 10 minutes on: the slots between are named `paused`, and the
    job runs again from its first slot at or after the time (the pause ends by itself)."""
    await add(store, JobSpec.build("held", "@every 1m", "cluster.chaos.witness:record"))
    await made_at_t0(settings)
    node = await open_session("n1", "za")
    await run_minutes(node, 1, 2)
    until = at(150 + 600)
    await store.holds.pause_until("held", "default", until, now=at(150))
    await rows(settings, REVISED, (at(150), 2))
    await run_minutes(node, 13, 14)

    result = await asyncio.to_thread(
        invoke, settings, "audit", "--from", T0.isoformat(), "--to", at(900).isoformat(),
        "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert verdicts(lines, "held") == [
        (at(60 * m).isoformat(), "paused" if 3 <= m <= 12 else "ran") for m in range(1, 15)
    ]
    paused = [x["detail"] for x in lines if x.get("verdict") == "paused"]
    assert set(paused) == {f"passed over by pause --until {until.isoformat()}"}
    (summary,) = [line for line in lines if line["type"] == "summary"]
    assert (summary["total"]["paused"], summary["total"]["missing"]) == (10, 0)


async def test_a_resume_before_the_time_ends_the_paused_slots(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await add(store, JobSpec.build("held", "@every 1m", "cluster.chaos.witness:record"))
    await made_at_t0(settings)
    node = await open_session("n1", "za")
    await run_minutes(node, 1, 2)
    await store.holds.pause_until("held", "default", at(150 + 600), now=at(150))
    await rows(settings, REVISED, (at(150), 2))
    resumed = await store.resume("held", now=at(330))
    assert (resumed.paused_until, resumed.slot_at) == (None, at(360))
    await rows(settings, REVISED, (at(330), 3))
    await run_minutes(node, 6, 7)

    result = await asyncio.to_thread(
        invoke, settings, "audit", "--from", T0.isoformat(), "--to", at(480).isoformat(),
        "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert verdicts(lines, "held") == [
        (at(60 * m).isoformat(), "paused" if 3 <= m <= 5 else "ran") for m in range(1, 8)
    ]


def test_bad_input_is_one_line_and_exit_2(initialised: Any) -> None:
    cases = [
        (("--from", "yesterday", "--to", at(60).isoformat()), "invalid from"),
        (("--from", "2026-01-01T00:00:00", "--to", at(60).isoformat()), "needs a UTC offset"),
        (("--from", at(60).isoformat(), "--to", T0.isoformat()), "is not after from"),
        (("--from", T0.isoformat(), "--to", "2026-06-01T00:00:00+00:00"), "at most 92 days"),
        ((*RANGE, "--grace", "soon"), "invalid grace"),
        ((*RANGE, "--json", "--csv"), "exclude each other"),
        (("--to", at(60).isoformat()), "Missing option '--from'"),
    ]
    for args, message in cases:
        result = initialised("audit", *args)
        assert result.exit_code == 2, (args, result.output)
        assert message in result.stderr and len(result.stderr.splitlines()) == 1, result.stderr
        assert result.stdout == ""


async def test_a_reader_that_stops_early_leaves_the_connection_usable(
    store: JobStore, settings: ClusterSettings
) -> None:
    """The web streams the audit: a client gone mid-answer closes the stream, and the
    pooled connection (its cursor, its transaction, the fetch asked for ahead) is clean."""
    await add(store, every_10s("long"))
    await made_at_t0(settings)
    slots = BATCH * 3 // 2  # the reader stops while the second batch is asked for
    await rows(
        settings,
        "INSERT INTO runs (job_id, tenant_id, job_name, scheduled_for, status) "
        "SELECT id, tenant_id, name, %s + k * interval '10 seconds', 'succeeded' "
        "FROM jobs, generate_series(1, %s) AS k RETURNING 1",
        (T0, slots),
    )
    scope = Scope(T0, at(10 * slots + 1), grace_s=0.0)
    async with aclosing(audit_lines(store.db.conn, scope)) as lines:
        async for line in lines:
            assert line.verdict == "ran"
            break
    assert await store.db.db_now() is not None
    counted = [line async for line in audit_lines(store.db.conn, scope)]
    assert len(counted) == slots and {line.verdict for line in counted} == {"ran"}


async def test_jobs_are_audited_a_page_at_a_time_in_name_order(
    store: JobStore, settings: ClusterSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(audit_store, "JOBS_PAGE", 2)
    await add(store, *(every_10s(name) for name in ("c", "a", "e", "b", "d")))
    await made_at_t0(settings)
    scope = Scope(T0, at(30), grace_s=0.0)
    found = [(line.job, line.slot) async for line in audit_lines(store.db.conn, scope)]
    assert found == [(name, at(s)) for name in "abcde" for s in (10, 20)]
