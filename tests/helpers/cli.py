"""The `pulse` command line as the tests run it, in the environment Pulse's launcher gives
its processes (``cluster.local.processes.pulse_env``: the caller's variables without its
``PULSE_*`` ones, plus one cluster's settings).

Two ways in, each taking a cluster's ``ClusterSettings`` or an environment of its own (a
mapping of variables; ``None`` unsets one), with ``PULSE_*`` variables by keyword on top:
``invoke`` runs a command in this process through click's ``CliRunner`` (fast; the root
logger is put back afterwards); ``spawn`` starts the real CLI as an operator runs it
(``python -m node`` is the `pulse` entry point) and ``.result()`` waits for it, to see exit
codes and output as they are. Also here: the documented ``--json`` keys, the checks of
what a refused command prints, and ``pulse audit --json``'s slot lines.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import psycopg
from click.testing import CliRunner, Result

from cluster.jobs.spec import OPTIONS
from cluster.local.processes import pulse_env
from cluster.settings import ClusterSettings
from node.cli import cli
from tests.helpers import REPO
from tests.helpers.databases import SCHEMAS

Env = Mapping[str, str | None]
Invoke = Callable[..., Result]
Shared = tuple[ClusterSettings, Invoke]  # a schema many refusal cases share, and its pulse
HANDLER = "app.jobs:tick"
RESULT_TIMEOUT_S = 60.0


def env_of(target: ClusterSettings | Env, **overrides: str | None) -> dict[str, str | None]:
    """The environment of a `pulse` command: the caller's ``PULSE_*`` variables unset (as
    ``None``), then ``target`` (a cluster's settings or variables), then ``overrides``."""
    env: dict[str, str | None] = dict.fromkeys(
        (k for k in os.environ if k.startswith("PULSE_")), None
    )
    env.update(pulse_env(target) if isinstance(target, ClusterSettings) else target)
    env.update(overrides)
    return env


def invoke(target: ClusterSettings | Env, *args: str, **overrides: str | None) -> Result:
    """``pulse ARGS`` in this process (click's ``CliRunner``); the root logger, which the
    command configures, is put back as it was."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        return CliRunner().invoke(
            cli, list(args), env=env_of(target, **overrides), prog_name="pulse"
        )
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


class PulseProcess(subprocess.Popen[str]):
    """A real `pulse` process, its stdout and stderr piped as text."""

    def result(self, timeout_s: float = RESULT_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        """Wait for it to end (killed after ``timeout_s``, as ``subprocess.run`` does);
        its exit code and output."""
        try:
            out, err = self.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            self.communicate()
            raise
        return subprocess.CompletedProcess(self.args, self.returncode, out, err)


def spawn(target: ClusterSettings | Env, *args: str, **overrides: str | None) -> PulseProcess:
    """Start ``pulse ARGS`` as a process of its own; ``.result()`` waits for it."""
    env = {k: v for k, v in env_of(target, **overrides).items() if v is not None}
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PULSE_")}, **env}
    return PulseProcess(
        [sys.executable, "-m", "node", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def initialised_pulse(settings: ClusterSettings) -> Invoke:
    """``invoke`` bound to ``settings`` once ``pulse init --shards 16`` has made the schema."""
    pulse = functools.partial(invoke, settings)
    result = pulse("init", "--shards", "16")
    assert result.exit_code == 0, result.stderr
    SCHEMAS.record_clean(settings.database_url, settings.schema)
    return pulse


# -- what commands print -------------------------------------------------------------------

# The documented --json shapes (cluster/jobs/models.py to_json): a job's options as
# declared (cluster/jobs/spec.py, those the read model carries), then its state.
JOB_KEYS = {d.name for d in OPTIONS.read} | {
    "id", "status", "shard", "next_run_at", "slot_at", "attempt", "last_run_at", "locked_by",
    "lease_expires_at", "failed_slots", "pause_note", "cancel_by", "paused_until", "revision",
    "schedules", "runs_done", "health", "adopt_at", "created_at", "updated_at",
}  # fmt: skip


SHOW_KEYS = JOB_KEYS | {
    "next_slots", "next_starts", "next_reasons", "calendar_skips", "recent_runs",
    "upstreams", "downstreams", "next_entries",
}  # fmt: skip

# `pulse jobs show --json` of a job with upstreams has these too.
GATED_SHOW_KEYS = {"after_match", "after_timeout_s", "after_failure", "waits_for", "waits_until"}


RUN_KEYS = {
    "id", "job_id", "tenant", "job", "scheduled_for", "attempt", "node_id", "zone", "status",
    "started_at", "finished_at", "duration_s", "error", "origin", "revision",
}  # fmt: skip

# `pulse runs show --json` adds these to the run.
RUN_SHOW_KEYS = {"output", "metrics", "coverage"}


def jobs_rows(settings: ClusterSettings) -> list[tuple[Any, ...]]:
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        return conn.execute(f"SELECT * FROM {settings.schema}.jobs ORDER BY id").fetchall()


def assert_bad_input(result: Result, field: str) -> None:
    """Exit 2, nothing on stdout, exactly one line on stderr naming the field."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"pulse: invalid {field}"), lines[0]
    assert "Traceback" not in result.stderr
    assert isinstance(result.exception, SystemExit)


def assert_one_line_error(stderr: str, *needles: str) -> None:
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("pulse: ")
    assert "Traceback" not in stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def add_args(name: str = "tick", *extra: str) -> list[str]:
    """``jobs add NAME``, every five minutes unless ``extra`` gives a ``--schedule`` (a
    repeated ``--schedule`` adds a schedule)."""
    schedule = [] if "--schedule" in extra else ["--schedule", "*/5 * * * *"]
    return ["jobs", "add", name, *schedule, "--handler", HANDLER, *extra]


def keep_runs_for_ever(settings: ClusterSettings) -> None:
    """``pulse config set keep_for 36500d``: records written on a clock months behind the
    database's are kept, not judged pruned by the audit (a real cluster would have pruned
    them after 30 days)."""
    result = invoke(settings, "config", "set", "keep_for", "36500d")
    assert result.exit_code == 0, result.output


async def audit_slots(
    settings: ClusterSettings, job: str, start: datetime, end: datetime
) -> tuple[int, list[dict[str, Any]]]:
    """``pulse audit --job JOB --json`` over ``[start, end)``, the cluster keeping its runs
    for ever (``keep_runs_for_ever``): its exit code (0, or 1 for a slot missing or a
    record overwritten) and its slot lines, in slot order."""
    await asyncio.to_thread(keep_runs_for_ever, settings)
    result = await asyncio.to_thread(
        invoke, settings, "audit", "--from", start.isoformat(), "--to", end.isoformat(),
        "--job", job, "--json",
    )  # fmt: skip
    assert result.exit_code in (0, 1), result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    return result.exit_code, [line for line in lines if line["type"] == "slot"]
