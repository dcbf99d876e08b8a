"""The database logins of a local cluster (``pulse up --roles``): the owner runs ``pulse
init``, then the nodes log in as a member of ``pulse_node`` and ``pulse web`` as one of
``pulse_web`` (``cluster.store.schema.roles``), each with a password made afresh at every start
and handed to its processes only in their environment, never printed."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, replace

from cluster.errors import ConfigError
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from cluster.store.schema.roles import RoleNames, can_create_roles, create_roles, set_login
from cluster.urls import with_login


@dataclass(frozen=True)
class Logins:
    """The settings the nodes and the web start with, and who they log in as."""

    node: ClusterSettings
    web: ClusterSettings
    node_user: str
    web_user: str


def login_names(names: RoleNames) -> tuple[str, str]:
    """The local cluster's login users: ``pulse_node_up`` and ``pulse_web_up``."""
    return f"{names.node}_up", f"{names.web}_up"


async def set_up_logins(store: JobStore, names: RoleNames) -> Logins:
    """Grant the roles on the store's schema and (re)make the two logins; ``ConfigError``
    when the database user may not make roles."""
    conn = store.db.conn
    if not await can_create_roles(conn):
        raise ConfigError(
            "--roles: the database user may not create roles (needs CREATEROLE); "
            "run without --roles, or as a user that may"
        )
    await create_roles(conn, store.settings.schema, names)
    node_user, web_user = login_names(names)
    urls = []
    for user, group in (node_user, names.node), (web_user, names.web):
        password = secrets.token_urlsafe(24)
        await set_login(conn, user, group, password)
        urls.append(with_login(store.settings.database_url, user, password))
    node, web = (replace(store.settings, database_url=url) for url in urls)
    return Logins(node, web, node_user, web_user)
