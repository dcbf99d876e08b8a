"""Running the application under uvicorn, with Pulse's logging (uvicorn's own log config
is left out, so ``--log-format json`` covers its lines too).

Proxy headers go through uvicorn's public ``proxy_headers``/``forwarded_allow_ips``: only a
peer in ``forwarded_allow_ips`` may say, with ``X-Forwarded-For`` and ``-Proto``, who the
client is and whether it came over TLS; anyone else's headers are ignored.
"""

from __future__ import annotations

import ipaddress
import logging

import uvicorn

from cluster.settings import ClusterSettings
from cluster.store.access.console_sessions import DEFAULT_SESSION_IDLE_S, DEFAULT_SESSION_MAX_S
from cluster.web.app import create_app
from cluster.web.limits import DEFAULT_PINGS_PER_SOURCE, DEFAULT_PINGS_PER_TOKEN
from cluster.web.pings import PingPathFilter
from cluster.web.state import SessionPolicy

logger = logging.getLogger(__name__)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a bind address) reaches only this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(
    settings: ClusterSettings,
    host: str,
    port: int,
    *,
    auth_failures: int,
    auth_window_s: float,
    forwarded_allow_ips: list[str],
    session_idle_s: float = DEFAULT_SESSION_IDLE_S,
    session_max_s: float = DEFAULT_SESSION_MAX_S,
    token_requests: int,
    pings_per_token: int = DEFAULT_PINGS_PER_TOKEN,
    pings_per_source: int = DEFAULT_PINGS_PER_SOURCE,
) -> None:
    sessions = SessionPolicy(session_idle_s, session_max_s, secure_always=not is_loopback(host))
    app = create_app(
        settings,
        auth_failures=auth_failures,
        auth_window_s=auth_window_s,
        sessions=sessions,
        token_requests=token_requests,
        pings_per_token=pings_per_token,
        pings_per_source=pings_per_source,
    )
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=None,
        proxy_headers=bool(forwarded_allow_ips),
        forwarded_allow_ips=forwarded_allow_ips or None,
        server_header=False,
        lifespan="on",
    )
    logger.info(
        "pulse web on http://%s:%d (console /console/, API /api/, OpenAPI /api/openapi.json)",
        host,
        port,
        extra={"event": "web_started"},
    )
    logging.getLogger("uvicorn.access").addFilter(PingPathFilter())  # tokens in paths
    uvicorn.Server(config).run()
