"""Run output against a real Postgres: the claim carries the job's output limit, the output
travels with the completion into ``runs.output`` (one row per slot: a later attempt's
replaces it, a lost attempt clears it), ``JobStore.run`` and ``pulse runs show`` read one
run with it."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from click.testing import Result

from cluster.errors import NotFound
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from cluster.store.lock.records import ClaimedJob, Completion
from cluster.store.lock.session import LockSession
from cluster.store.lock.writer import ResultWriter
from node.handlers.context import Outcome
from node.handlers.output import RunLog, TailBuffer, compose
from node.pipeline.outcomes import after_run
from tests.helpers.cli import (
    RUN_KEYS,
    RUN_SHOW_KEYS,
    assert_bad_input,
    assert_one_line_error,
    invoke,
)
from tests.helpers.examples import documented, json_differs
from tests.helpers.history import rows
from tests.helpers.sessions import Opener

T0 = datetime(2026, 1, 1, tzinfo=UTC)
ALL = list(range(16))
OUTPUT_KEYS = {"stdout", "stderr", "result", "log", "truncated"}


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def every_10s(name: str, **kw: Any) -> JobSpec:
    return JobSpec.build(name, "@every 10s", "cluster.chaos.witness:record", **kw)


def produced(stdout: bytes = b"", result: Any = None, line: str | None = None) -> str:
    out = TailBuffer(1000)
    out.write(stdout)
    log = RunLog(1000)
    if line is not None:
        log.add(line)
    text = compose(stdout=out, result=result, log=log, limit=1000)
    assert text is not None
    return text


def outcome(status: str, output: str | None) -> Outcome:
    return Outcome(status, None if status == "succeeded" else "boom", 0.01, output)


async def output_of(settings: ClusterSettings, job: ClaimedJob) -> Any:
    (row,) = await rows(
        settings, "SELECT output FROM runs WHERE job_id = %s AND scheduled_for = %s",
        (job.id, job.slot),
    )  # fmt: skip
    return row["output"]


async def test_the_claim_carries_the_jobs_output_limit(
    store: JobStore, open_session: Opener
) -> None:
    await store.definitions.apply(
        [every_10s("small", output_limit="1KiB"), every_10s("plain")], now=T0
    )
    node = await open_session("n1")
    claimed = (await node.claim(ALL, 10, 30.0, now=at(10))).jobs
    assert {j.name: j.output_limit for j in claimed} == {"small": 1024, "plain": 16384}


async def test_output_travels_with_the_completion_into_the_run_row(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await store.definitions.apply([every_10s("talks"), every_10s("silent")], now=T0)
    node = await open_session("n1")
    claimed = {j.name: j for j in (await node.claim(ALL, 10, 30.0, now=at(10))).jobs}
    talks, silent = claimed["talks"], claimed["silent"]
    text = produced('Grüße 世界 😀\n"quoted" \\ \t'.encode(), {"rows": 3}, "ctx.log ☃")
    writer = ResultWriter(settings, "n1", "z", statement_timeout_s=5)
    try:
        done = [
            after_run(talks, outcome("succeeded", text), at(11))[0],
            after_run(silent, outcome("succeeded", None), at(11))[0],
        ]
        assert await writer.completions.complete(done, now=at(11)) == {talks.id, silent.id}
    finally:
        await writer.close()
    expected = {
        "stdout": 'Grüße 世界 😀\n"quoted" \\ \t',
        "stderr": None,
        "result": {"rows": 3},
        "log": ["ctx.log ☃"],
        "truncated": [],
    }
    assert await output_of(settings, talks) == expected
    assert await output_of(settings, silent) is None
    shown = await store.run("talks")
    assert (shown.status, shown.scheduled_for, shown.output) == ("succeeded", at(10), expected)
    assert (await store.run("silent")).output_json() == {
        "stdout": None, "stderr": None, "result": None, "log": None, "truncated": [],
    }  # fmt: skip
    # Listings leave output out: it is read one run at a time.
    assert [r.output for r in await store.runs()] == [None, None]


async def test_a_later_attempt_replaces_the_output_and_a_lost_one_clears_it(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await store.definitions.apply([every_10s("flaky", retries=3, retry_backoff="1s")], now=T0)
    node = await open_session("n1")

    async def claim(now: datetime) -> ClaimedJob:
        (job,) = (await node.claim(ALL, 10, 30.0, now=now)).jobs
        return job

    first = await claim(at(10))
    done, _ = after_run(first, outcome("failed", produced(b"attempt 1\n")), at(11))
    assert done.next_attempt == 2 and done.output is not None
    assert await node.completions.complete([done], now=at(11)) == {first.id}
    assert (await output_of(settings, first))["stdout"] == "attempt 1\n"

    second = await claim(at(12))
    assert await node.release([(second.id, second.lease_token)], "shutting down", now=at(12))
    assert (await store.run("flaky")).status == "lost"
    assert await output_of(settings, second) is None

    third = await claim(at(13))
    assert await node.recover(ALL, [], now=at(100)), "the lease expired"
    assert (await store.run("flaky")).status == "lost"
    assert await output_of(settings, third) is None

    fourth = await claim(at(101))
    done, _ = after_run(fourth, outcome("succeeded", produced(result="done")), at(102))
    assert await node.completions.complete([done], now=at(102)) == {fourth.id}
    run = await store.run("flaky")
    assert (run.status, run.attempt, run.scheduled_for) == ("succeeded", 4, at(10))
    assert run.output is not None and run.output["result"] == "done"
    assert run.output["stdout"] is None


async def test_one_run_by_slot_or_the_latest_and_the_attempt_in_flight(
    store: JobStore, open_session: Opener
) -> None:
    await store.definitions.apply([every_10s("tick"), every_10s("other", tenant="acme")], now=T0)
    with pytest.raises(NotFound, match="no run of job 'tick' in tenant 'default'"):
        await store.run("tick")
    node = await open_session("n1")
    for slot, text in ((10, b"first\n"), (20, b"second\n")):
        claimed = [j for j in (await node.claim(ALL, 10, 30.0, now=at(slot))).jobs]
        done = [
            after_run(j, outcome("succeeded", produced(text)), at(slot + 1))[0] for j in claimed
        ]
        assert len(await node.completions.complete(done, now=at(slot + 1))) == 2
    latest = await store.run("tick")
    assert latest.scheduled_for == at(20) and latest.output is not None
    assert latest.output["stdout"] == "second\n"
    older = await store.run("tick", slot=at(10))
    assert older.output is not None and older.output["stdout"] == "first\n"
    assert (await store.run("other", "acme")).job_name == "other"
    with pytest.raises(NotFound, match="of slot"):
        await store.run("tick", slot=at(15))
    with pytest.raises(NotFound):
        await store.run("other")  # another tenant's job
    # The attempt in flight is the latest run: running, its output not written yet.
    (claimed,) = [j for j in (await node.claim(ALL, 10, 30.0, now=at(30))).jobs if j.name == "tick"]
    running = await store.run("tick")
    assert (running.status, running.scheduled_for, running.output) == ("running", at(30), None)
    assert (await store.run("tick", slot=at(20))).status == "succeeded"


# -- pulse runs show ---------------------------------------------------------------------------


def show(settings: ClusterSettings, *args: str) -> Result:
    return invoke(settings, "runs", "show", *args)


async def seed_failed_run(settings: ClusterSettings, output: str) -> None:
    """Job ``talks`` whose slot at T0 + 10 s failed with ``output``, and ``never-ran``."""
    async with JobStore.open(settings) as store:
        await store.init(shards=16)
        await store.definitions.apply(
            [every_10s("talks"), JobSpec.build("never-ran", "@daily", "m:f")], now=T0
        )
    session = LockSession(settings, "n1", "z", session_timeout_s=10, statement_timeout_s=5)
    await session.open()
    try:
        (job,) = (await session.claim(ALL, 10, 30.0, now=at(10))).jobs
        done = Completion(
            job.id, job.lease_token, job.slot, "failed", "exit status 1", 0.5, at(20), at(20), 1,
            output,
        )  # fmt: skip
        assert await session.completions.complete([done], now=at(11)) == {job.id}
    finally:
        await session.close()


def test_pulse_runs_show(settings: ClusterSettings) -> None:
    text = produced(b"hello \xff\n", [1, "two"], "a log line")
    asyncio.run(seed_failed_run(settings, text))

    result = show(settings, "talks", "--json")
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert set(shown) == RUN_KEYS | RUN_SHOW_KEYS
    assert shown["metrics"] == {}
    assert (shown["status"], shown["error"], shown["scheduled_for"]) == (
        "failed", "exit status 1", at(10).isoformat(),
    )  # fmt: skip
    assert shown["output"] == {
        "stdout": "hello \ufffd\n", "stderr": None, "result": [1, "two"], "log": ["a log line"],
        "truncated": [],
    }  # fmt: skip
    by_slot = show(settings, "talks", "--slot", "2026-01-01T01:00:10+01:00", "--json")
    assert json.loads(by_slot.stdout) == shown

    human = show(settings, "talks")
    assert human.exit_code == 0, human.output
    for needed in ("failed (attempt 1)", "--- stdout", "hello \ufffd", "--- result", "--- log",
                   "a log line", "exit status 1"):  # fmt: skip
        assert needed in human.stdout, (needed, human.stdout)
    assert "--- stderr" not in human.stdout


def test_pulse_runs_show_json_has_the_shape_output_md_shows(settings: ClusterSettings) -> None:
    asyncio.run(seed_failed_run(settings, produced(b"", {"rows": 3}, "rolling up pro")))
    result = show(settings, "talks", "--json")
    assert result.exit_code == 0, result.output
    shown = json.loads("\n".join(documented("docs/output.md#show")))
    assert json_differs(shown, json.loads(result.stdout)) == []


def test_pulse_runs_show_bad_input_and_missing_runs(settings: ClusterSettings) -> None:
    asyncio.run(seed_failed_run(settings, produced(b"x")))
    for slot in ("yesterday", "2026-01-01T00:00:10"):
        assert_bad_input(show(settings, "never-ran", "--slot", slot), "slot")
    for args in (["never-ran"], ["nobody"], ["never-ran", "--tenant", "acme"]):
        missing = show(settings, *args)
        assert missing.exit_code == 1, missing.output
        assert missing.stdout == ""
        assert_one_line_error(missing.stderr, "no run", repr(args[0]))
