"""Running the application under uvicorn, with Pulse's logging (uvicorn's own log config
is left out, so ``--log-format json`` covers its lines too)."""

from __future__ import annotations

import logging

import uvicorn

from cluster.settings import ClusterSettings
from cluster.web.app import create_app

logger = logging.getLogger(__name__)


def serve(
    settings: ClusterSettings,
    host: str,
    port: int,
    *,
    auth_failures: int,
    auth_window_s: float,
    token_requests: int,
) -> None:
    app = create_app(
        settings,
        auth_failures=auth_failures,
        auth_window_s=auth_window_s,
        token_requests=token_requests,
    )
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=None,
        proxy_headers=True,
        server_header=False,
        lifespan="on",
    )
    logger.info(
        "pulse web on http://%s:%d (console /console/, API /api/, OpenAPI /api/openapi.json)",
        host,
        port,
        extra={"event": "web_started"},
    )
    uvicorn.Server(config).run()
