"""``pulse chaos`` run as an operator runs it (``python -m node chaos``), and the JSON report
it writes: what the chaos e2e tests check."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from cluster.chaos.servers.standalone import ServerError, pg_bin_dir
from tests.helpers.cli import spawn


def servers_available() -> bool:
    """The throwaway Postgres and Redis servers of a plain chaos run can be started here."""
    try:
        pg_bin_dir()
    except ServerError:
        return False
    return shutil.which("redis-server") is not None


def run_chaos(workdir: Path, *args: str, timeout_s: float) -> tuple[dict[str, Any], str, int]:
    """``pulse chaos ARGS`` with its report and work files in ``workdir``; (the report, the
    table it printed, its exit code). Fails, with the end of its stderr, without a report."""
    report_path = workdir / "report.json"
    files = ("--json", str(report_path), "--workdir", str(workdir / "run"))
    done = spawn({}, "chaos", *args, *files).result(timeout_s)
    assert report_path.exists(), f"no report (exit {done.returncode}):\n{done.stderr[-4000:]}"
    return json.loads(report_path.read_text()), done.stdout, done.returncode
