"""A module with two decorators refused at import time (a bad time zone, a bad timeout)
between good ones: ``apply --module`` reports both and applies nothing."""

from __future__ import annotations

from pulsecron import Registry, RunContext

jobs = Registry()


@jobs.cron("0 * * * *")
def fine(ctx: RunContext) -> None:
    return None


@jobs.cron("0 * * * *", tz="Mars/Olympus")
def rollup(ctx: RunContext) -> None:
    return None


@jobs.every("1m", name="cleanup", timeout="soon")
def cleanup(ctx: RunContext) -> None:
    return None
