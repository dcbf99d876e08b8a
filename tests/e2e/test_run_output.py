"""Issue 6, end to end: what handlers produce goes from a real ``pulse node`` process through
Postgres to ``pulse runs show --json`` (the real CLI): shell stdout and stderr with unicode
and bytes that are not UTF-8, a chatty command cut to the last bytes of its limit, a
command killed at its timeout with what it printed before, a Python handler's ``ctx.log``
lines (from two threads) and return value, and a value that is not JSON as its repr."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from tests.helpers.cli import spawn
from tests.helpers.fleet import Fleet
from tests.helpers.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

HANDLERS = "tests.e2e.output_handlers"
SPECS = [
    JobSpec.build(
        "unicode", "@daily", "shell:printf 'Grüße 世界 😀\\n'; printf '\\377\\376 raw\\n' >&2"
    ),
    JobSpec.build("chatty", "@daily", "shell:seq 1 100000", output_limit="1KiB"),
    JobSpec.build(
        "stalls", "@daily", "shell:echo started; echo 'waiting' >&2; exec sleep 60", timeout="3s"
    ),
    JobSpec.build("report", "@daily", f"{HANDLERS}:report"),
    JobSpec.build("summary", "@daily", f"{HANDLERS}:summary"),
]


def setup(settings: ClusterSettings) -> None:
    async def go() -> None:
        async with JobStore.open(settings) as store:
            await store.init(16)
            await store.definitions.apply(SPECS)

    asyncio.run(go())


def trigger_all(settings: ClusterSettings) -> None:
    async def go() -> None:
        async with JobStore.open(settings) as store:
            for spec in SPECS:
                await store.trigger(spec.name)

    asyncio.run(go())


def show_all(settings: ClusterSettings) -> dict[str, dict[str, Any]]:
    started = [spawn(settings, "runs", "show", s.name, "--json") for s in SPECS]
    done = [p.result() for p in started]
    for proc in done:
        assert proc.returncode == 0 and proc.stderr == "", (proc.args, proc.stderr)
    return {s.name: json.loads(p.stdout) for s, p in zip(SPECS, done, strict=True)}


def test_output_of_shell_and_python_handlers_reaches_pulse_runs_show(
    settings: ClusterSettings, fleet: Fleet
) -> None:
    setup(settings)
    fleet.start("n1")
    trigger_all(settings)

    def finished() -> bool:
        fleet.check_alive()
        rows = fleet.sql("SELECT job_name FROM runs WHERE status <> 'running'")
        return len(rows) == len(SPECS)

    until(finished, "every triggered job to finish", 60)
    runs = show_all(settings)
    status = {name: run["status"] for name, run in runs.items()}
    assert status == {
        "unicode": "succeeded",
        "chatty": "succeeded",
        "stalls": "timed_out",
        "report": "succeeded",
        "summary": "succeeded",
    }, fleet.logs()
    output = {name: run["output"] for name, run in runs.items()}
    none: dict[str, Any] = {"stdout": None, "stderr": None, "result": None, "log": None}

    assert output["unicode"] == {
        **none, "stdout": "Grüße 世界 😀\n", "stderr": "\ufffd\ufffd raw\n", "truncated": [],
    }  # fmt: skip
    everything = "".join(f"{i}\n" for i in range(1, 100_001))
    assert output["chatty"] == {**none, "stdout": everything[-1024:], "truncated": ["stdout"]}
    assert output["stalls"] == {
        **none,
        "stdout": "started\n",
        "stderr": "waiting\n",
        "truncated": [],
    }
    assert runs["stalls"]["error"] == "timed out after 3s; process group killed"
    assert output["report"] == {
        **none,
        "result": {"rows": 3, "greeting": "Grüße 世界 😀"},
        "log": ["attempt 1 of report", "from a helper thread ☃"],
        "truncated": [],
    }
    assert output["summary"] == {**none, "result": "Summary(rows=3)", "truncated": []}
    assert {run["node_id"] for run in runs.values()} == {"n1"}
