"""What one ``pulse web`` process holds between requests: the connection pool and the failed
authentication counts. Nothing a second replica would need to agree with."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request

from cluster.config.allowlist import AllowList
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


async def allow_list(store: JobStore) -> AllowList:
    """The allow-list as stored now (read per change, so ``pulse config set`` applies at once)."""
    return AllowList.from_config(await store.config_values())
