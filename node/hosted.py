"""A node hosted on an application's event loop (``async with pulsecron.Node(...)``).

The same ``node.runtime.Node`` that ``pulse node`` runs, with the same start-up checks,
services and drain, started as a task of the application's loop. It installs no signal
handlers: the application (uvicorn, a Starlette lifespan, aiohttp) owns its signals and
stops the node by leaving the ``async with`` block, which drains like SIGTERM does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType

from cluster.errors import ConfigError
from cluster.jobs.registry import Registry, handlers_of, specs_of
from cluster.settings import ClusterSettings, NodeSettings
from node.runtime import Node

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class NodeStatus:
    """What a hosted node sees now (``HostedNode.status()``)."""

    node_id: str
    running: bool  # False before start, after stop, or once a vital service crashed
    members: tuple[str, ...]  # live members of the cluster, this node included
    held_shards: tuple[int, ...]
    runs_in_flight: int


class HostedNode:
    """Run a Pulse node for the duration of an ``async with`` block.

    ``settings`` are this node's (``NodeSettings()``: a generated id, zone ``default``);
    ``cluster`` defaults to ``ClusterSettings.from_env()`` (``PULSE_*``). The jobs of
    ``sync_jobs`` registries are created at start if missing, as ``pulse node
    --sync-jobs`` does.
    """

    def __init__(
        self,
        settings: NodeSettings | None = None,
        *,
        cluster: ClusterSettings | None = None,
        sync_jobs: Sequence[Registry] = (),
    ) -> None:
        self.settings = (settings or NodeSettings()).validate()
        self.cluster = (cluster or ClusterSettings.from_env()).validate()
        self._node = Node(self.cluster, self.settings, specs_of(sync_jobs), handlers_of(sync_jobs))
        self._task: asyncio.Task[int] | None = None

    @property
    def node_id(self) -> str:
        return self.settings.node_id

    async def start(self) -> None:
        """Start the node; return once every service runs. ``ConfigError`` if it stopped
        at start (wrong schema version, shard count, bad synced jobs: see its log)."""
        if self._task is not None:
            raise ConfigError("this node was already started")
        self._task = asyncio.create_task(self._node.run(signals=False))
        started = asyncio.create_task(self._node.started.wait())
        try:
            await asyncio.wait({self._task, started}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # the application gave up starting (e.g. no Postgres)
            started.cancel()
            await self.stop()
            raise
        if not self._node.started.is_set():
            started.cancel()
            code = await self._task
            raise ConfigError(f"node {self.node_id} stopped at start (exit code {code})")

    async def stop(self) -> int:
        """Drain (finish or hand back the runs in flight, release the shards) and stop;
        the exit code ``pulse node`` would have had (0 clean, 1 a service crashed)."""
        if self._task is None:
            return 0
        self._node.stop.set()
        return await asyncio.shield(self._task)

    def status(self) -> NodeStatus:
        state, parts = self._node.state, self._node.parts
        running = self._task is not None and not self._task.done() and not self._node.stop.is_set()
        return NodeStatus(
            node_id=self.node_id,
            running=running,
            members=state.live if state else (),
            held_shards=tuple(sorted(state.held)) if state else (),
            runs_in_flight=len(parts.executor.running) if parts else 0,
        )

    async def __aenter__(self) -> HostedNode:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
