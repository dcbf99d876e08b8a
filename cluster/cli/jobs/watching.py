"""``pulse jobs ping-url``, ``pulse jobs adopt`` and ``pulse ping``: watch jobs, whose runs
come from pings sent by crons Pulse does not run (docs/jobs.md, "Watch jobs")."""

from __future__ import annotations

import sys
from pathlib import Path
from urllib.parse import urlsplit

import click
import httpx

from cluster.cli.base import (
    PulseCommand,
    emit_json,
    fail,
    parse_time,
    seconds,
    tenant_option,
    with_store,
)
from cluster.jobs.models import iso
from cluster.store.jobstore.store import JobStore

DEFAULT_WEB_URL = "http://127.0.0.1:8080"
DEFAULT_PING_TIMEOUT_S = 10.0
# What `pulse ping` sends of a body file, at most (the server keeps the job's output_limit).
MAX_PING_BODY = 1024 * 1024

web_url_option = click.option(
    "--web-url",
    default=DEFAULT_WEB_URL,
    show_default=True,
    envvar="PULSE_WEB_URL",
    help="Where `pulse web` is reached from the crons' hosts, to print the full URL.",
)


def ping_url(web_url: str, token: str) -> str:
    return f"{web_url.rstrip('/')}/api/ping/{token}"


def show_ping_url(url: str) -> None:
    """The URL, once, and the crontab line that uses it."""
    click.echo(f"ping URL (shown once, keep it secret): {url}")
    click.echo(
        f"crontab: <schedule> curl -fsS -m 10 --retry 3 {url}/start >/dev/null; "
        f"<command> 2>&1 | curl -fsS -m 10 --retry 3 --data-binary @- {url}"
    )


@click.command("ping-url", cls=PulseCommand)
@click.argument("name")
@tenant_option
@click.option("--rotate", is_flag=True, help="Make a new URL; the old one stops working.")
@web_url_option
@click.option("--json", "as_json", is_flag=True, help='Print {"ping_url": ...}.')
@with_store
async def ping_url_command(
    store: JobStore, name: str, tenant: str, rotate: bool, web_url: str, as_json: bool
) -> None:
    """Show a watch job's ping URL: its first, or with --rotate a new one (only a hash of
    it is kept, so an issued URL cannot be shown again)."""
    url = ping_url(web_url, await store.watch.token(name, tenant, rotate=rotate))
    if as_json:
        emit_json({"ping_url": url})
    else:
        show_ping_url(url)


@click.command("adopt", cls=PulseCommand)
@click.argument("name")
@tenant_option
@click.option("--at", "at", required=True, help="The first slot Pulse runs (ISO 8601, offset).")
@click.option("--handler", default=None, help="What Pulse runs [default: the job's handler].")
@click.option("--json", "as_json", is_flag=True, help="Print the job as JSON.")
@with_store
async def adopt_command(
    store: JobStore, name: str, tenant: str, at: str, handler: str | None, as_json: bool
) -> None:
    """Turn a watch job into a job Pulse runs, from the slot --at on; the slots before stay
    watched. A legacy ping for a slot Pulse runs is recorded as a double run."""
    slot = parse_time(at, "at")
    assert slot is not None
    job = await store.watch.adopt(name, tenant, at=slot, handler=handler)
    if as_json:
        emit_json(job.to_json())
    else:
        click.echo(f"adopted {job.name} (tenant {job.tenant}): Pulse runs it from {iso(slot)}")


@click.command("ping", cls=PulseCommand)
@click.argument("url")
@click.option("--start", "kind", flag_value="start", help="The run starts.")
@click.option("--fail", "kind", flag_value="fail", help="The run failed.")
@click.option(
    "--body-file",
    type=click.Path(dir_okay=False, allow_dash=True),
    default=None,
    help="Send this file (- for stdin) as the run's output.",
)
@click.option("--timeout", default="10s", show_default=True, help="Give up after this long.")
def ping_command(url: str, kind: str | None, body_file: str | None, timeout: str) -> None:
    """Ping a watch job's URL (from a crontab: pulse ping URL --start; cmd; pulse ping URL)."""
    timeout_s = seconds(timeout, "timeout")
    if not url.startswith(("http://", "https://")) or "/api/ping/" not in url:
        fail("invalid url: a ping URL is http(s)://HOST/api/ping/TOKEN", 2)
    target = url.rstrip("/") + ("" if kind is None else f"/{kind}")
    body = b""
    if body_file is not None:
        source = sys.stdin.buffer if body_file == "-" else Path(body_file).open("rb")  # noqa: SIM115
        with source:
            body = source.read(MAX_PING_BODY)
    try:
        answer = httpx.post(target, content=body, timeout=timeout_s)
    except httpx.HTTPError as exc:
        fail(f"ping failed: {_host(target)} {_why(exc)}", 1)
    if answer.status_code != 200:
        fail(f"ping refused: HTTP {answer.status_code}", 1)
    click.echo(f"{answer.json().get('status', 'recorded')} for slot {answer.json().get('slot')}")


def _host(url: str) -> str:
    """HOST[:PORT] of ``url``: never its path (the token is the job's secret) nor a password."""
    parts = urlsplit(url)
    return parts.hostname if parts.port is None else f"{parts.hostname}:{parts.port}"  # type: ignore[return-value]


def _why(exc: httpx.HTTPError) -> str:
    """A failed request in a few words: what went wrong, without the URL's token."""
    if isinstance(exc, httpx.TimeoutException):
        return "did not answer in time"
    if isinstance(exc, httpx.ConnectError):
        return "cannot be reached (connection refused or no such host)"
    return f"failed ({type(exc).__name__})"
