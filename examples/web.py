"""A FastAPI service that hosts a Pulse node: its jobs are defined next to the code, synced
when the service starts, and run on the service's own event loop.

    pulse init                                   # once per database
    uvicorn examples.web:app --port 8000         # PULSE_* configure the cluster
    curl localhost:8000/health                   # the node's members, shards, runs

Run it on several hosts: each process is a full Pulse node, every slot still runs once.
Stopping uvicorn (Ctrl-C, SIGTERM) drains the node: runs in flight finish, shards are
released, then the process exits. uvicorn keeps its own signal handlers.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Response

from pulsecron import ClusterSettings, Node, NodeSettings, Registry, RunContext

logger = logging.getLogger("examples.web")

jobs = Registry(tenant="web")


@jobs.every("1s", name="ping", timeout="10s")
async def ping(ctx: RunContext) -> dict[str, Any]:
    """A frequent, quick job: what a service checks about itself."""
    ctx.log(f"ping from {ctx.node_id}")
    return {"slot": ctx.scheduled_for.isoformat()}


@jobs.every("2s", name="report", timeout="30s", catch_up="skip", grace="1m")
async def report(ctx: RunContext) -> dict[str, Any]:
    """A slower job (a report that takes a while): a stopping service lets it finish."""
    await asyncio.sleep(float(os.environ.get("EXAMPLE_REPORT_SECONDS", "1.5")))
    return {"slot": ctx.scheduled_for.isoformat(), "attempt": ctx.attempt}


def node_settings() -> NodeSettings:
    """This process's node: its id from ``PULSE_NODE_ID`` (else generated)."""
    drain_s = float(os.environ.get("EXAMPLE_DRAIN_S", "30"))
    node_id = os.environ.get("PULSE_NODE_ID")
    if node_id:
        return NodeSettings(node_id=node_id, drain_timeout_s=drain_s)
    return NodeSettings(drain_timeout_s=drain_s)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    async with Node(node_settings(), cluster=ClusterSettings.from_env(), sync_jobs=[jobs]) as node:
        app.state.node = node
        yield
    logger.info("node drained; service stopping")


app = FastAPI(title="Pulse example service", lifespan=lifespan)


@app.get("/health")
async def health(response: Response) -> dict[str, Any]:
    """200 while the node runs, 503 once it stopped (a vital service crashed)."""
    status = app.state.node.status()
    if not status.running:
        response.status_code = 503
    return {
        "node": status.node_id,
        "running": status.running,
        "members": list(status.members),
        "held_shards": len(status.held_shards),
        "runs_in_flight": status.runs_in_flight,
    }
