"""What one ``pulse web`` process holds between requests: the connection pool, the failed
sign-in counts and its session settings. Nothing a second replica would need to agree with."""

from __future__ import annotations

from dataclasses import dataclass, field

from fastapi import Request

from cluster.config.admission import ApiPolicy
from cluster.config.allowlist import AllowList
from cluster.config.envlist import EnvAllowList
from cluster.store.access.console_sessions import DEFAULT_SESSION_IDLE_S, DEFAULT_SESSION_MAX_S
from cluster.store.jobstore.pool import StorePool
from cluster.store.jobstore.store import JobStore
from cluster.web.limits import PingRate, SignInThrottle


@dataclass(frozen=True)
class SessionPolicy:
    """How long a console session lives, and whether its cookie is ``Secure`` over plain
    HTTP (it is unless the server listens on loopback only, where no TLS can sit)."""

    idle_s: float = DEFAULT_SESSION_IDLE_S
    max_age_s: float = DEFAULT_SESSION_MAX_S
    secure_always: bool = False


@dataclass
class WebState:
    pool: StorePool
    throttle: SignInThrottle
    sessions: SessionPolicy
    pings: PingRate = field(default_factory=PingRate)


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
