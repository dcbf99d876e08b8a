"""A module whose decorator is refused at import time (a bad time zone)."""

from __future__ import annotations

from pulsecron import Registry, RunContext

jobs = Registry()


@jobs.cron("0 * * * *", tz="Mars/Olympus")
def rollup(ctx: RunContext) -> None:
    return None
