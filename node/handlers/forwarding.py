"""Running ``http:`` and ``celery:`` handlers on a node, and the clients they share: one
pooled HTTP client per node (behind the egress guard, ``cluster.outbound``) and one Celery
app per broker, both made on first use and closed when the node stops (``node.runtime``).

``node.handlers.invoke`` calls ``run`` for these references; the stored reference is parsed
once per distinct text (``cluster.jobs.handlerrefs``), so a run costs a dict lookup. The
cluster's settings these runs need (``egress.allow``, ``celery.brokers``) come from
``config``, the node's cached view of the ``config`` table; without one (a node in a
test), nothing private is reachable and no broker has a name.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping

import httpx

from cluster.config import brokers
from cluster.config.egress import EgressPolicy
from cluster.errors import InvalidInput
from cluster.jobs.handlerrefs import CeleryTarget, HttpTarget, parse
from cluster.outbound.transport import guarded_client
from node.handlers.celerytask import CeleryApps, run_celery
from node.handlers.context import Outcome, RunContext
from node.handlers.httpcall import run_http

CACHE_MAX = 1024
MAX_CONNECTIONS = 100

ConfigSource = Callable[[], Awaitable[Mapping[str, str]]]


async def no_config() -> Mapping[str, str]:
    return {}


class Forwarders:
    def __init__(self, celery_broker: str | None = None, config: ConfigSource = no_config) -> None:
        self._client: httpx.AsyncClient | None = None
        self.celery = CeleryApps(celery_broker)
        self._config = config
        self._targets: dict[str, HttpTarget | CeleryTarget] = {}

    async def egress(self) -> EgressPolicy:
        return EgressPolicy.from_config(dict(await self._config()))

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = guarded_client(self.egress, max_connections=MAX_CONNECTIONS)
        return self._client

    def _target(self, ref: str) -> HttpTarget | CeleryTarget:
        found = self._targets.get(ref)
        if found is None:
            if len(self._targets) >= CACHE_MAX:
                self._targets.clear()
            found = self._targets[ref] = parse(ref)
        return found

    async def run(self, ref: str, ctx: RunContext, timeout_s: float) -> Outcome:
        """The outcome of one attempt; a stored reference that no longer parses fails it."""
        try:
            target = self._target(ref)
        except InvalidInput as exc:
            return Outcome("failed", f"invalid handler: {exc}", 0.0)
        if isinstance(target, HttpTarget):
            return await run_http(self.client, target, ctx, timeout_s)
        try:
            named = brokers.parse((await self._config()).get(brokers.CELERY_BROKERS, ""))
        except InvalidInput:
            named = {}
        return await run_celery(self.celery, target, ctx, timeout_s, named)

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()
        await asyncio.to_thread(self.celery.close)
