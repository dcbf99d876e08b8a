"""The ``pulse`` root group: the options every command shares, ``pulse init``, and the
table of every other command, in one place, by the module that defines it.

A command's module is imported only when that command runs or the help lists the commands
(``base.LazyCommands``): ``pulse jobs list`` does not load the chaos harness, the alert
channels and their mailer, or the web API, and ``pulse --version`` no command module at
all. ``tests/unit/test_cli_commands.py`` checks the table against the commands it loads.

``node/cli.py`` adds ``pulse node`` (the only command that runs node code) to this group.
"""

from __future__ import annotations

import click

from cluster.cli.base import PulseGroup, fail, global_options, with_store
from cluster.errors import ConfigError, InvalidInput
from cluster.settings import DEFAULT_SHARDS, IDENTIFIER
from cluster.store import JobStore
from cluster.store.schema.roles import (
    HANDLER_ROLE,
    NODE_ROLE,
    WEB_ROLE,
    RoleNames,
    create_roles,
    set_login,
    superuser_owner,
)

# name -> "module:attribute" of each command but init and node, attached when looked up
COMMANDS = {
    "alerts": "cluster.cli.alerts:alerts",
    "audit": "cluster.cli.runs:audit",
    "backfills": "cluster.cli.backfills:backfills",
    "calendars": "cluster.cli.calendars:calendars",
    "chaos": "cluster.cli.chaos:chaos",
    "config": "cluster.cli.config:config",
    "handlers": "cluster.cli.handlers:handlers",
    "import": "cluster.cli.imports:import_group",
    "jobs": "cluster.cli.jobs:jobs",
    "limits": "cluster.cli.tenants:limits",
    "ping": "cluster.cli.jobs.watching:ping_command",
    "runs": "cluster.cli.runs:runs",
    "schedule": "cluster.cli.schedule:schedule_command",
    "status": "cluster.cli.status:status",
    "tenants": "cluster.cli.tenants:tenants",
    "tokens": "cluster.cli.tokens:tokens",
    "up": "cluster.cli.up:up",
    "web": "cluster.cli.web:web",
    "windows": "cluster.cli.windows:windows",
}


@click.group(
    cls=PulseGroup,
    lazy_commands=COMMANDS,
    params=global_options(),
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(package_name="pulsecron", prog_name="pulse")
def cli() -> None:
    """Pulse: a distributed cron scheduler on Postgres and Redis."""


@cli.command()
@click.option(
    "--shards",
    type=int,
    envvar="PULSE_SHARDS",
    default=None,
    help=f"Number of shards, fixed at the first init [default {DEFAULT_SHARDS}].",
)
@click.option(
    "--roles",
    is_flag=True,
    envvar="PULSE_INIT_ROLES",
    help="Also make the nodes' and the web's database roles and set their grants.",
)
@click.option("--node-role", default=NODE_ROLE, show_default=True, envvar="PULSE_NODE_ROLE")
@click.option("--web-role", default=WEB_ROLE, show_default=True, envvar="PULSE_WEB_ROLE")
@click.option(
    "--handler-role", default=HANDLER_ROLE, show_default=True, envvar="PULSE_HANDLER_ROLE"
)
@click.option(
    "--node-login",
    default=None,
    envvar="PULSE_NODE_LOGIN",
    help="With --roles: also make (or update) this LOGIN user in the node role, its "
    "password from PULSE_NODE_LOGIN_PASSWORD.",
)
@click.option(
    "--web-login",
    default=None,
    envvar="PULSE_WEB_LOGIN",
    help="With --roles: the same for the web role, from PULSE_WEB_LOGIN_PASSWORD.",
)
@click.option("--node-login-password", envvar="PULSE_NODE_LOGIN_PASSWORD", hidden=True)
@click.option("--web-login-password", envvar="PULSE_WEB_LOGIN_PASSWORD", hidden=True)
@with_store
async def init(
    store: JobStore,
    shards: int | None,
    roles: bool,
    node_role: str,
    web_role: str,
    handler_role: str,
    node_login: str | None,
    web_login: str | None,
    node_login_password: str | None,
    web_login_password: str | None,
) -> None:
    """Create or upgrade the database schema (safe to repeat). With --roles, also make the
    NOLOGIN roles nodes and pulse web log in through (by members:
    CREATE ROLE billing_node LOGIN PASSWORD '...' IN ROLE pulse_node) with only the grants
    each needs; run it again after each upgrade."""
    names = RoleNames(node_role, web_role, handler_role).validate()  # bad names: nothing written
    logins = [
        (user, group, password, field)
        for user, group, password, field in (
            (node_login, names.node, node_login_password, "node-login"),
            (web_login, names.web, web_login_password, "web-login"),
        )
        if user
    ]
    for user, _, password, field in logins:
        if not roles:
            raise InvalidInput(field, "needs --roles")
        if not IDENTIFIER.match(user):
            raise InvalidInput(field, f"{user!r} is not a lower-case SQL identifier")
        if not password:
            raise InvalidInput(field, f"set PULSE_{field.upper().replace('-', '_')}_PASSWORD")
    try:
        result = await store.init(shards)
    except ConfigError as exc:  # an applied migration's file was edited: nothing written
        fail(str(exc), 2)
    applied = ", ".join(result.applied) or "none"
    click.echo(
        f"schema {store.settings.schema} at {result.version} "
        f"(applied: {applied}); {result.shards} shards"
    )
    if owner := await superuser_owner(store.db.conn, store.settings.schema):
        click.echo(
            f"warning: the schema's owner {owner} is a superuser, so its definer functions "
            "run with every right; own it by a role of its own (docs/security.md#database-roles)",
            err=True,
        )
    if roles:
        made = await create_roles(store.db.conn, store.settings.schema, names)
        for user, group, password, _ in logins:
            assert password is not None
            await set_login(store.db.conn, user, group, password)
            made.append(f"login {user}")
        new = f" (made: {', '.join(made)})" if made else ""
        click.echo(
            f"roles {names.node} (nodes), {names.web} (web), {names.handler} (handlers' "
            f"transactions): grants set{new}"
        )
