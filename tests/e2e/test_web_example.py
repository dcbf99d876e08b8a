"""The FastAPI example (``examples/web.py``) under a real uvicorn process: the hosted node
syncs its jobs, fires them, answers on its health route, and when uvicorn is stopped with
SIGTERM it drains: the run in flight finishes and is recorded, the node leaves the cluster,
the process exits."""

from __future__ import annotations

import asyncio
import signal
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from cluster.jobs.models import Run
from cluster.local.processes import Command, free_port, pulse_env
from cluster.members import MemberRegistry
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from tests.helpers import REPO
from tests.helpers.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


async def _init(settings: ClusterSettings) -> None:
    async with JobStore.open(settings) as store:
        await store.init(shards=16)


async def _runs(settings: ClusterSettings, job: str) -> list[Run]:
    async with JobStore.open(settings) as store:
        return await store.runs(job=job, tenant="web", limit=100)


async def _slot(settings: ClusterSettings, slot: datetime) -> Run:
    async with JobStore.open(settings) as store:
        return await store.run("report", "web", slot=slot)


async def _members(settings: ClusterSettings) -> list[str]:
    registry = MemberRegistry(settings, timeout_s=2)
    try:
        return [m.info.node_id for m in await registry.live(5.0)]
    finally:
        await registry.close()


def _health(port: int) -> dict[str, Any] | None:
    try:
        response = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
    except httpx.TransportError:
        return None
    body: dict[str, Any] = response.json()
    return body if response.status_code == 200 else None


def test_the_fastapi_example_fires_jobs_and_drains_on_sigterm(
    settings: ClusterSettings, tmp_path: Path
) -> None:
    asyncio.run(_init(settings))
    port = free_port()
    argv = (sys.executable, "-m", "uvicorn", "examples.web:app", "--port", str(port))
    env = pulse_env(
        settings, PULSE_NODE_ID="web-1", EXAMPLE_REPORT_SECONDS="3", EXAMPLE_DRAIN_S="20"
    )
    web = Command(argv, env, REPO).start("web", tmp_path / "web.log")
    try:
        health = until(
            lambda: (h := _health(port)) and h["held_shards"] == 16 and h, "a healthy node", 60
        )
        assert (health["node"], health["running"], health["members"]) == ("web-1", True, ["web-1"])

        def pings() -> list[Run]:
            return [r for r in asyncio.run(_runs(settings, "ping")) if r.status == "succeeded"]

        until(lambda: len(pings()) >= 2, "two successful pings", 60)

        def report_in_flight() -> Run | None:
            """A report run the database and the health route both show in flight."""
            running = [r for r in asyncio.run(_runs(settings, "report")) if r.status == "running"]
            health = _health(port)
            return running[0] if running and health and health["runs_in_flight"] else None

        in_flight = until(report_in_flight, "a report run in flight", 60)
        # uvicorn re-raises the signal once its shutdown (our drain included) is complete.
        assert web.stop(60) in (0, -signal.SIGTERM), web.tail()
        # Drained, not abandoned: the run that was in flight finished and was recorded.
        finished = asyncio.run(_slot(settings, in_flight.scheduled_for))
        assert (finished.status, finished.node_id) == ("succeeded", "web-1"), finished
        assert "web-1" not in asyncio.run(_members(settings))
        assert "node drained; service stopping" in web.tail(200), web.tail()
    finally:
        web.stop(10)
