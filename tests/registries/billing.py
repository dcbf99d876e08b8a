"""A user's module of jobs: two registries, sync and async handlers."""

from __future__ import annotations

import os
from pathlib import Path

from pulsecron import Registry, RunContext

jobs = Registry(tenant="acme")
ops = Registry()


@jobs.cron("0 * * * *", catch_up="backfill", timeout="10m", payload={"plan": "pro"})
async def billing_rollup(ctx: RunContext) -> dict[str, str]:
    return {"plan": str(ctx.payload["plan"])}


@ops.every("1s", name="beat", retries=2)
def beat(ctx: RunContext) -> None:
    witness = os.environ.get("PULSE_TEST_BEAT_FILE")
    if witness:
        with Path(witness).open("a", encoding="utf-8") as out:
            out.write(f"{ctx.node_id} {ctx.scheduled_for.isoformat()}\n")
