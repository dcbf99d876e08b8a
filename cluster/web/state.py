"""What one ``pulse web`` process holds between requests: the connection pool and the failed
authentication counts. Nothing a second replica would need to agree with."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request

from cluster.config.admission import ApiPolicy
from cluster.config.allowlist import AllowList
from cluster.config.envlist import EnvAllowList
from cluster.store.jobs import JobStore
from cluster.store.pool import StorePool
from cluster.web.limits import FailureLimiter


@dataclass
class WebState:
    pool: StorePool
    limiter: FailureLimiter


def state_of(request: Request) -> WebState:
    state: WebState = request.app.state.pulse
    return state


async def api_policy(store: JobStore, scope: str | None) -> ApiPolicy:
    """What jobs a token of ``scope`` may write, as stored now (read per change, so ``pulse
    config set`` and a newly registered handler apply at once)."""
    values = await store.config_values()
    return ApiPolicy(
        handlers=AllowList.from_config(values),
        env=EnvAllowList.from_config(values),
        registered=await store.handlers.usable(scope),
    )
