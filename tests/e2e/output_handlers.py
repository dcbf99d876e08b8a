"""Handlers whose output the end-to-end tests read back (``tests/e2e/test_run_output.py``);
a node imports them from its working directory, the repository."""

from __future__ import annotations

import threading
from typing import Any

from node.handlers.context import RunContext


def report(ctx: RunContext) -> dict[str, Any]:
    """Logs from its own thread and from a thread it starts; returns JSON."""
    ctx.log(f"attempt {ctx.attempt} of {ctx.job_name}")
    helper = threading.Thread(target=ctx.log, args=("from a helper thread ☃",))
    helper.start()
    helper.join()
    return {"rows": 3, "greeting": "Grüße 世界 😀"}


class Summary:
    def __repr__(self) -> str:
        return "Summary(rows=3)"


async def summary(ctx: RunContext) -> Summary:
    return Summary()
