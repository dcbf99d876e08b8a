"""Handlers the trace tests' nodes load by name (tests/e2e/test_traces.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from node.handlers.context import RunContext


def slow_first(ctx: RunContext) -> None:
    """Note the attempt and its traceparent in ``payload["dir"]``; the first attempt then
    runs long enough to be killed mid-run."""
    line = {"attempt": ctx.attempt, "node": ctx.node_id, "traceparent": ctx.traceparent}
    with (Path(ctx.payload["dir"]) / "attempts.jsonl").open("a") as file:
        file.write(json.dumps(line) + "\n")
    if ctx.attempt == 1:
        time.sleep(60)
