"""What handlers produce reaches their outcome: a shell command's stdout and stderr (read
while it runs, so a full pipe never blocks it; the last bytes kept), a Python handler's
return value and ``ctx.log`` lines, and what a timed-out run printed before it was killed.
Real subprocesses and the node's handler threads."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from node.handlers.context import Outcome, RunContext
from node.handlers.invoke import invoke
from node.handlers.threads import HandlerThreads
from node.pipeline.executor import Executor
from tests.helpers.claimed import Outcomes, job

HERE = __name__
pytestmark = pytest.mark.timeout(60)


def returns_dict(ctx: RunContext) -> dict[str, Any]:
    ctx.log("from a handler thread")
    return {"rows": 3, "name": "Zoë 😀"}


async def logs_async(ctx: RunContext) -> list[int]:
    ctx.log("one")
    await asyncio.sleep(0)
    ctx.log("two")
    return [1, 2]


class Report:
    def __repr__(self) -> str:
        return "Report(rows=3)"


def returns_object(ctx: RunContext) -> Report:
    return Report()


def fails_after_logging(ctx: RunContext) -> None:
    ctx.log("about to fail")
    raise ValueError("bad row")


async def hangs_after_logging(ctx: RunContext) -> None:
    ctx.log("waiting for the upstream")
    await asyncio.sleep(30)


def chatty(ctx: RunContext) -> None:
    for i in range(1000):
        ctx.log(f"line {i:04d}")  # nine bytes each


def quiet(ctx: RunContext) -> None:
    return None


unblock = threading.Event()


def logs_then_blocks(ctx: RunContext) -> None:
    ctx.log("before the wait")
    unblock.wait(30)


def returns_awaitable(ctx: RunContext) -> Any:
    ctx.log("sync part")
    return logs_async(ctx)


def raises_unstorable(ctx: RunContext) -> None:
    raise ValueError("nul \x00 and a lone \ud800")


def context(limit: int = 16384) -> RunContext:
    return RunContext(
        job_id=uuid.uuid4(),
        job_name="j",
        tenant_id="t",
        payload={},
        scheduled_for=datetime(2026, 1, 1, tzinfo=UTC),
        attempt=1,
        timeout_s=30.0,
        node_id="n1",
        zone="z",
        output_limit=limit,
    )


@pytest.fixture
async def threads() -> AsyncIterator[HandlerThreads]:
    pool = HandlerThreads(4)
    yield pool
    pool.shutdown()


async def run(
    threads: HandlerThreads, ref: str, limit: int = 16384, timeout_s: float = 30.0
) -> tuple[Outcome, dict[str, Any] | None]:
    outcome = await invoke(ref, context(limit), timeout_s, threads)
    return outcome, None if outcome.output is None else json.loads(outcome.output)


def output(**parts: Any) -> dict[str, Any]:
    empty: dict[str, Any] = {"stdout": None, "stderr": None, "result": None, "log": None}
    return {**empty, "truncated": [], **parts}


# -- shell ---------------------------------------------------------------------------------------


async def test_shell_stdout_and_stderr_round_trip_unicode(threads: HandlerThreads) -> None:
    outcome, got = await run(threads, "shell:printf 'Grüße 世界 😀\\n'; printf 'warn ☃' >&2")
    assert outcome.status == "succeeded"
    assert got == output(stdout="Grüße 世界 😀\n", stderr="warn ☃")


async def test_binary_output_is_stored_with_replacement_characters(
    threads: HandlerThreads,
) -> None:
    _, got = await run(threads, "shell:printf '\\377\\376\\000ok'")
    assert got == output(stdout="\ufffd\ufffd\ufffdok")


async def test_a_silent_command_has_no_output(threads: HandlerThreads) -> None:
    outcome, got = await run(threads, "shell:true")
    assert (outcome.status, got) == ("succeeded", None)


async def test_a_failed_command_keeps_its_stderr_in_the_error_and_the_output(
    threads: HandlerThreads,
) -> None:
    outcome, got = await run(threads, "shell:echo partial; echo 'disk full' >&2; exit 3")
    assert outcome.status == "failed"
    assert outcome.error == "exit status 3: disk full"
    assert got == output(stdout="partial\n", stderr="disk full\n")


async def test_a_chatty_command_never_blocks_and_keeps_its_last_bytes(
    threads: HandlerThreads, tmp_path: Path
) -> None:
    # Megabytes on both pipes, interleaved: reading one pipe only would block the writer.
    script = tmp_path / "chatty.py"
    script.write_text(
        "import sys\n"
        "for i in range(150_000):\n"
        "    sys.stdout.write(f'out {i:07d}\\n')\n"
        "    sys.stderr.write(f'err {i:07d}\\n')\n"
    )
    outcome, got = await run(threads, f"shell:{sys.executable} {script}", limit=1000)
    assert outcome.status == "succeeded", outcome.error
    everything = "".join(f"out {i:07d}\n" for i in range(150_000))
    assert got is not None
    assert got["stdout"] == everything[-1000:]
    assert got["stderr"] == everything[-1000:].replace("out", "err")
    assert got["truncated"] == ["stdout", "stderr"]


async def test_a_limit_of_zero_keeps_no_output_but_the_error_tail(
    threads: HandlerThreads,
) -> None:
    outcome, got = await run(threads, "shell:echo hidden; echo why >&2; exit 1", limit=0)
    assert got is None
    assert outcome.error == "exit status 1: why"


async def test_a_timed_out_command_keeps_what_it_printed_before_the_kill(
    threads: HandlerThreads,
) -> None:
    outcome, got = await run(
        threads, "shell:echo started; echo 'still going' >&2; exec sleep 60", timeout_s=3.0
    )
    assert outcome.status == "timed_out"
    assert got == output(stdout="started\n", stderr="still going\n")


# -- Python --------------------------------------------------------------------------------------


async def test_a_sync_handler_keeps_its_return_value_and_log(threads: HandlerThreads) -> None:
    outcome, got = await run(threads, f"{HERE}:returns_dict")
    assert outcome.status == "succeeded"
    assert got == output(result={"rows": 3, "name": "Zoë 😀"}, log=["from a handler thread"])


async def test_an_async_handler_keeps_its_return_value_and_log(threads: HandlerThreads) -> None:
    _, got = await run(threads, f"{HERE}:logs_async")
    assert got == output(result=[1, 2], log=["one", "two"])


async def test_a_value_that_is_not_json_is_kept_as_its_repr(threads: HandlerThreads) -> None:
    _, got = await run(threads, f"{HERE}:returns_object")
    assert got == output(result="Report(rows=3)")


async def test_a_failed_or_timed_out_handler_keeps_its_log(threads: HandlerThreads) -> None:
    failed, got = await run(threads, f"{HERE}:fails_after_logging")
    assert failed.status == "failed" and "bad row" in (failed.error or "")
    assert got == output(log=["about to fail"])
    timed_out, got = await run(threads, f"{HERE}:hangs_after_logging", timeout_s=0.2)
    assert timed_out.status == "timed_out"
    assert got == output(log=["waiting for the upstream"])


async def test_a_chatty_log_keeps_its_newest_lines(threads: HandlerThreads) -> None:
    _, got = await run(threads, f"{HERE}:chatty", limit=90)
    assert got == output(
        log=["[990 earlier lines dropped]", *[f"line {i:04d}" for i in range(990, 1000)]],
        truncated=["log"],
    )


async def test_a_handler_that_returns_nothing_has_no_output(threads: HandlerThreads) -> None:
    outcome, got = await run(threads, f"{HERE}:quiet")
    assert (outcome.status, got) == ("succeeded", None)


async def test_error_texts_hold_nothing_a_completion_cannot_write(
    threads: HandlerThreads,
) -> None:
    # NUL fails the batch's JSON in Postgres; a lone surrogate cannot even be sent.
    raised, _ = await run(threads, f"{HERE}:raises_unstorable")
    assert raised.error == "ValueError: nul \ufffd and a lone \ufffd"
    shell, got = await run(threads, "shell:printf 'bad\\000byte' >&2; exit 1")
    assert shell.error == "exit status 1: bad\ufffdbyte"
    assert got == output(stderr="bad\ufffdbyte")


async def test_the_executors_thread_path_keeps_results_and_logs() -> None:
    """Sync handlers run on the executor's own batched path, not through invoke()."""
    unblock.clear()
    done = Outcomes()
    executor = Executor(4, "n1", "z", done)
    try:
        executor.submit(job(f"{HERE}:returns_dict", "dict")._replace(output_limit=1000))
        executor.submit(job(f"{HERE}:returns_awaitable", "awaitable"))
        executor.submit(job(f"{HERE}:logs_then_blocks", "blocks", timeout_s=2.0))
        await done.wait_for(3)
    finally:
        unblock.set()
        executor.shutdown()
    got = {name: json.loads(o.output or "null") for name, o in done.got.items()}
    assert got["dict"] == output(
        result={"rows": 3, "name": "Zoë 😀"}, log=["from a handler thread"]
    )
    assert got["awaitable"] == output(result=[1, 2], log=["sync part", "one", "two"])
    assert done.got["blocks"].status == "timed_out"
    assert got["blocks"] == output(log=["before the wait"])
