"""``pulse web``: the HTTP API and console (cluster/web/), from the optional ``web`` extra."""

from __future__ import annotations

import click

from cluster.cli.base import PulseCommand, duration_option, fail, settings_of
from cluster.errors import InvalidInput
from cluster.timing.durations import parse_duration

DEFAULT_BIND = "127.0.0.1:8080"
DEFAULT_AUTH_FAILURES = 10  # as cluster.web.limits, which needs the extra to import
DEFAULT_AUTH_WINDOW_S = 60.0
DEFAULT_TOKEN_REQUESTS = 4  # as cluster.web.inflight: half the pool


def parse_bind(bind: str) -> tuple[str, int]:
    host, sep, port = bind.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidInput("bind", f"{bind!r} is not HOST:PORT, e.g. 127.0.0.1:8080")
    return host.strip("[]"), int(port)


@click.command("web", cls=PulseCommand)
@click.option(
    "--bind",
    default=DEFAULT_BIND,
    show_default=True,
    envvar="PULSE_WEB_BIND",
    help="Address to listen on, HOST:PORT.",
)
@click.option(
    "--auth-failures",
    type=click.IntRange(1, 1_000_000),
    default=DEFAULT_AUTH_FAILURES,
    show_default=True,
    envvar="PULSE_WEB_AUTH_FAILURES",
    help="Failed authentications per address and window before it is refused (429).",
)
@duration_option(
    "--auth-window",
    DEFAULT_AUTH_WINDOW_S,
    "Window of --auth-failures.",
    envvar="PULSE_WEB_AUTH_WINDOW",
)
@click.option(
    "--token-requests",
    type=click.IntRange(1, 1000),
    default=DEFAULT_TOKEN_REQUESTS,
    show_default=True,
    envvar="PULSE_WEB_TOKEN_REQUESTS",
    help="Requests of one token in flight at once; past it, 429 (keeps one client from "
    "holding every database connection).",
)
@click.pass_context
def web(
    ctx: click.Context, bind: str, auth_failures: int, auth_window: str, token_requests: int
) -> None:
    """Serve the HTTP API (/api/, OpenAPI at /api/openapi.json) and the console (/console/)."""
    try:
        host, port = parse_bind(bind)
        window_s = parse_duration(auth_window, "auth-window")
    except InvalidInput as exc:
        fail(f"invalid {exc}", 2)
    try:
        from cluster.web import server
    except ImportError as exc:
        fail(f"pulse web needs the web extra: pip install 'pulsecron[web]' ({exc})", 1)
    server.serve(
        settings_of(ctx),
        host,
        port,
        auth_failures=auth_failures,
        auth_window_s=window_s,
        token_requests=token_requests,
    )
