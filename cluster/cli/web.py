"""``pulse web``: the HTTP API and console (cluster/web/), from the optional ``web`` extra.

The defaults come from the plain-Python modules that apply them; the modules that need
FastAPI are imported only when the server starts."""

from __future__ import annotations

import ipaddress

import click

from cluster.cli.base import PulseCommand, duration_option, fail, settings_of
from cluster.errors import InvalidInput
from cluster.store.access.console_sessions import DEFAULT_SESSION_IDLE_S, DEFAULT_SESSION_MAX_S
from cluster.store.jobstore.pool import DEFAULT_TOKEN_REQUESTS
from cluster.timing.durations import parse_duration
from cluster.web.limits import (
    DEFAULT_AUTH_FAILURES,
    DEFAULT_AUTH_WINDOW_S,
    DEFAULT_PINGS_PER_SOURCE,
    DEFAULT_PINGS_PER_TOKEN,
)

DEFAULT_BIND = "127.0.0.1:8080"
# No proxy unless told: any process on the host could otherwise forge a client's address.
DEFAULT_FORWARDED_ALLOW_IPS = ""
MAX_SESSION_S = 366 * 86400.0


def parse_bind(bind: str) -> tuple[str, int]:
    host, sep, port = bind.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidInput("bind", f"{bind!r} is not HOST:PORT, e.g. 127.0.0.1:8080")
    return host.strip("[]"), int(port)


def parse_proxies(text: str) -> list[str]:
    """``--forwarded-allow-ips``: addresses or networks, comma-separated, ``*`` for any peer,
    empty or ``none`` for no proxy (forwarded headers are then ignored)."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if items in ([], ["none"]):
        return []
    for item in items:
        if item == "*":
            continue
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError as exc:
            raise InvalidInput(
                "forwarded-allow-ips", f"{item!r} is not an IP address or network"
            ) from exc
    return items


def _session_duration(text: str, field: str) -> float:
    seconds = parse_duration(text, field)
    if not 0 < seconds <= MAX_SESSION_S:
        raise InvalidInput(field, "must be more than 0s and at most 366d")
    return seconds


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
    help="Failed sign-ins per address (and per token prefix) and window before 429.",
)
@duration_option(
    "--auth-window",
    DEFAULT_AUTH_WINDOW_S,
    "Window of --auth-failures.",
    envvar="PULSE_WEB_AUTH_WINDOW",
)
@click.option(
    "--forwarded-allow-ips",
    default=DEFAULT_FORWARDED_ALLOW_IPS,
    envvar="PULSE_WEB_FORWARDED_ALLOW_IPS",
    help="Proxies whose X-Forwarded-For/-Proto are believed: addresses or networks, "
    "comma-separated (e.g. 127.0.0.1 for a proxy on this host); by default none.",
)
@duration_option(
    "--session-idle",
    DEFAULT_SESSION_IDLE_S,
    "A console session unused this long ends.",
    envvar="PULSE_WEB_SESSION_IDLE",
)
@duration_option(
    "--session-max",
    DEFAULT_SESSION_MAX_S,
    "A console session ends this long after sign-in, used or not.",
    envvar="PULSE_WEB_SESSION_MAX",
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
@click.option(
    "--ping-limit",
    type=click.IntRange(1, 1_000_000),
    default=DEFAULT_PINGS_PER_TOKEN,
    show_default=True,
    envvar="PULSE_WEB_PING_LIMIT",
    help="Pings of one ping URL per minute; past it, 429.",
)
@click.option(
    "--ping-source-limit",
    type=click.IntRange(1, 1_000_000),
    default=DEFAULT_PINGS_PER_SOURCE,
    show_default=True,
    envvar="PULSE_WEB_PING_SOURCE_LIMIT",
    help="Pings with an unknown token from one address per minute; past it, 429 "
    "(valid pings from it are never counted here).",
)
@click.pass_context
def web(
    ctx: click.Context,
    bind: str,
    auth_failures: int,
    auth_window: str,
    forwarded_allow_ips: str,
    session_idle: str,
    session_max: str,
    token_requests: int,
    ping_limit: int,
    ping_source_limit: int,
) -> None:
    """Serve the HTTP API (/api/, OpenAPI at /api/openapi.json) and the console (/console/)."""
    try:
        host, port = parse_bind(bind)
        window_s = parse_duration(auth_window, "auth-window")
        proxies = parse_proxies(forwarded_allow_ips)
        idle_s = _session_duration(session_idle, "session-idle")
        max_s = _session_duration(session_max, "session-max")
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
        forwarded_allow_ips=proxies,
        session_idle_s=idle_s,
        session_max_s=max_s,
        token_requests=token_requests,
        pings_per_token=ping_limit,
        pings_per_source=ping_source_limit,
    )
