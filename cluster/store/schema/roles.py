"""Least-privilege database roles: ``pulse init --roles`` makes the group roles a node and
``pulse web`` log in through, and grants each only what its statements need.

A third, ``pulse_handler``, has no right on Pulse's tables at all: a node started with
``--handler-role pulse_handler`` runs its handlers' ``ctx.transaction()`` statements as it,
and the node role is made a member so its logins may switch to it; grant it what the
handlers' own tables need. All are NOLOGIN group roles; an operator makes login users in them
(``CREATE ROLE billing_node LOGIN PASSWORD '...' IN ROLE pulse_node``). Neither owns
anything, so neither may alter or drop the schema: only the owner, who runs ``pulse init``
and the migrations, may. The grants below are worked out from ``cluster/store/sql/*.sql``
and who runs each statement; a table missing here gets no grant at all (least privilege
by default), and ``tests/integration/test_roles.py`` fails until it is placed. What fires
in a trigger runs as the caller unless the function is SECURITY DEFINER (migration 019:
the quota checks, the forgetting of a deleted job's runs). None of the roles may make
temporary tables in the database (``TEMPORARY`` is revoked, from PUBLIC too), and every
definer searches the schema before ``pg_temp``. Why so: docs/design/roles.md.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass

import psycopg
from psycopg import sql

from cluster.errors import InvalidInput, StoreError
from cluster.settings import IDENTIFIER
from cluster.store.connect import Conn, describe

__all__ = [
    "GRANTS",
    "HANDLER_ROLE",
    "NODE_ROLE",
    "WEB_ROLE",
    "RoleNames",
    "can_create_roles",
    "create_roles",
    "set_login",
    "superuser_owner",
]

NODE_ROLE = "pulse_node"
WEB_ROLE = "pulse_web"
HANDLER_ROLE = "pulse_handler"

READ = "SELECT"
# table: (the node's privileges, the web's); "" is none.
GRANTS: Mapping[str, tuple[str, str]] = {
    "schema_version": (READ, READ),
    "meta": (READ, READ),
    # Written by `pulse config set` on the owner's host only.
    "config": (READ, READ),
    # The web: create, replace, pause, resume, trigger, cancel and delete jobs.
    "jobs": ("SELECT, INSERT, UPDATE, DELETE", "SELECT, INSERT, UPDATE, DELETE"),
    # The web: make and cancel requests; the node moves their cursors.
    "backfills": ("SELECT, UPDATE", "SELECT, INSERT, UPDATE"),
    # The web: mark a running flight cancelled, drop a cancelled backfill's queued ones.
    "flights": ("SELECT, INSERT, UPDATE, DELETE", "SELECT, UPDATE, DELETE"),
    # History: written and pruned by nodes only.
    "runs": ("SELECT, INSERT, UPDATE, DELETE", READ),
    # Rules are made with `pulse alerts add` (the owner's host); the outbox is the node's.
    "alert_rules": (READ, READ),
    # UPDATE for the row locks of pruning (FOR UPDATE SKIP LOCKED), which need it.
    "alert_events": ("SELECT, INSERT, UPDATE, DELETE", READ),
    "alert_deliveries": ("SELECT, INSERT, UPDATE, DELETE", READ),
    "zone_spaces": ("SELECT, INSERT", "SELECT, INSERT"),
    # A claim takes a tenant's place (tenant_take), a run's end gives it back; the web sets
    # limits (and deleting a running job gives its place back).
    "tenant_limits": ("SELECT, UPDATE", "SELECT, INSERT, UPDATE, DELETE"),
    "tenant_moves": ("SELECT, INSERT, DELETE", "SELECT, INSERT, DELETE"),
    "tenant_room": (READ, READ),
    # Named limits: a claim takes keys (limit_take), a run's end gives them back, a claim
    # records the slots it passed over; the web sets and removes keys, and locks those a
    # job it writes names (uses_check).
    "limit_keys": ("SELECT, UPDATE", "SELECT, INSERT, UPDATE, DELETE"),
    "limit_moves": ("SELECT, INSERT, DELETE", "SELECT, INSERT, DELETE"),
    "limit_room": (READ, READ),
    "limit_waits": ("SELECT, INSERT, UPDATE, DELETE", "SELECT, INSERT, UPDATE, DELETE"),
    # Read by the quota checks, which run as the owner.
    "tenant_quotas": ("", "SELECT, INSERT, UPDATE, DELETE"),
    # The web authenticates tokens (stamping their last use, nothing else: a web login must
    # not rewrite a token's role, tenant or expiry) and writes the audit trail; tokens are
    # made and revoked with `pulse tokens` on the owner's host.
    "api_tokens": ("", "SELECT, UPDATE (last_used_at)"),
    "api_audit": ("", "SELECT, INSERT"),
    # The console's sessions are the web's alone; revoking a token deletes them (cascade).
    "console_sessions": ("", "SELECT, INSERT, UPDATE, DELETE"),
    # A node loading registries records what they offer; the web reads it at each write.
    "registered_handlers": ("SELECT, INSERT, UPDATE", READ),
    # Calendars and windows are written with `pulse calendars` / `pulse windows` on the
    # owner's host; a node (--sync-jobs) and the web read them to plan the jobs they write.
    "calendars": (READ, READ),
    "windows": (READ, READ),
    # Edges are written with the jobs they join (the API, --sync-jobs) and dropped with them.
    "job_edges": ("SELECT, INSERT, UPDATE, DELETE", "SELECT, INSERT, UPDATE, DELETE"),
    # Revisions are written by the triggers on jobs alone (as the owner), so no role can
    # forge one; nodes prune those of removed jobs.
    "job_revisions": ("SELECT, DELETE", READ),
    # A chained job's released slots: written by completions (the node), taken by the
    # statement that moves the job on (a completion, or the web's resume), dropped with it.
    "chain_slots": ("SELECT, INSERT, UPDATE, DELETE", "SELECT, INSERT, UPDATE, DELETE"),
    # Each-node slots and their members' runs: written by nodes alone (docs/design/each-node.md).
    "node_slots": ("SELECT, INSERT, UPDATE, DELETE", READ),
    "node_runs": ("SELECT, INSERT, UPDATE, DELETE", READ),
    # Double runs are written by watch_record (a ping, SECURITY DEFINER) and read by both;
    # they go with their job.
    "watch_doubles": (READ, READ),
}


@dataclass(frozen=True)
class RoleNames:
    node: str = NODE_ROLE
    web: str = WEB_ROLE
    handler: str = HANDLER_ROLE

    @classmethod
    def from_env(cls) -> RoleNames:
        """The names ``PULSE_NODE_ROLE``, ``PULSE_WEB_ROLE`` and ``PULSE_HANDLER_ROLE`` give,
        as ``pulse init --roles`` reads them."""
        return cls(
            os.environ.get("PULSE_NODE_ROLE") or NODE_ROLE,
            os.environ.get("PULSE_WEB_ROLE") or WEB_ROLE,
            os.environ.get("PULSE_HANDLER_ROLE") or HANDLER_ROLE,
        ).validate()

    def validate(self) -> RoleNames:
        given = (("node-role", self.node), ("web-role", self.web), ("handler-role", self.handler))
        for field, name in given:
            if not IDENTIFIER.match(name):
                raise InvalidInput(field, f"{name!r} is not a lower-case SQL identifier")
        if len({self.node, self.web, self.handler}) < 3:
            raise InvalidInput("web-role", "the node, web and handler roles must differ")
        return self


async def create_roles(conn: Conn, schema: str, names: RoleNames) -> list[str]:
    """Make the roles that do not exist yet (NOLOGIN) and set their grants on ``schema`` to
    exactly ``GRANTS``; safe to repeat. The roles made now (the others existed)."""
    names = names.validate()
    made = []
    try:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext('pulse.roles'))")
            cur = await conn.execute(
                "SELECT c.relname FROM pg_class c"
                " WHERE c.relnamespace = %(s)s::regnamespace AND c.relkind IN ('r', 'v')",
                {"s": schema},
            )
            tables = {row["relname"] for row in await cur.fetchall()}
            for index, role in enumerate((names.node, names.web, names.handler)):
                cur = await conn.execute(
                    "SELECT 1 FROM pg_roles WHERE rolname = %(r)s", {"r": role}
                )
                if await cur.fetchone() is None:
                    await conn.execute(
                        sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(role))
                    )
                    made.append(role)
                if role == names.handler:  # nothing of Pulse's at all
                    await _grant(conn, schema, role, None)
                else:
                    grants = {t: g[index] for t, g in GRANTS.items() if t in tables}
                    await _grant(conn, schema, role, grants)
            handler, node = sql.Identifier(names.handler), sql.Identifier(names.node)
            await conn.execute(sql.SQL("GRANT {} TO {}").format(handler, node))
            await _revoke_temporary(conn, (names.node, names.web, names.handler))
    except psycopg.Error as exc:
        raise StoreError(f"cannot set up roles: {describe(exc)}") from exc
    return made


async def _grant(conn: Conn, schema: str, role: str, grants: Mapping[str, str] | None) -> None:
    """Exactly ``grants`` to ``role`` on ``schema``; None: no use of the schema at all."""
    ident = sql.Identifier(role)
    on_schema = sql.Identifier(schema)
    await conn.execute(
        sql.SQL("REVOKE ALL ON ALL TABLES IN SCHEMA {} FROM {}").format(on_schema, ident)
    )
    await conn.execute(
        sql.SQL("REVOKE ALL ON ALL SEQUENCES IN SCHEMA {} FROM {}").format(on_schema, ident)
    )
    if grants is None:
        await conn.execute(sql.SQL("REVOKE USAGE ON SCHEMA {} FROM {}").format(on_schema, ident))
        return
    await conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(on_schema, ident))
    for table, privileges in grants.items():
        if privileges:
            statement = sql.SQL("GRANT {} ON {}.{} TO {}").format(
                sql.SQL(privileges), on_schema, sql.Identifier(table), ident
            )
            await conn.execute(statement)
    # A serial column's default calls nextval(), which needs USAGE (identity columns do not).
    await conn.execute(
        sql.SQL("GRANT USAGE ON ALL SEQUENCES IN SCHEMA {} TO {}").format(on_schema, ident)
    )


async def _revoke_temporary(conn: Conn, roles: tuple[str, ...]) -> None:
    """No temporary tables for Pulse's roles in this database. Every role holds TEMPORARY
    through PUBLIC, so PUBLIC loses it too; grant it back to the roles of other
    applications that need it (docs/security.md#database-roles)."""
    cur = await conn.execute("SELECT current_database() AS db")
    row = await cur.fetchone()
    database = sql.Identifier(row["db"] if row else "")
    grantees = sql.SQL(", ").join([sql.SQL("PUBLIC"), *(sql.Identifier(r) for r in roles)])
    await conn.execute(
        sql.SQL("REVOKE TEMPORARY ON DATABASE {} FROM {}").format(database, grantees)
    )


async def superuser_owner(conn: Conn, schema: str) -> str | None:
    """The owner of ``schema`` when it is a superuser (its definer functions then run with
    every right in the cluster), else None."""
    try:
        cur = await conn.execute(
            "SELECT r.rolname FROM pg_namespace n JOIN pg_roles r ON r.oid = n.nspowner"
            " WHERE n.nspname = %(s)s AND r.rolsuper",
            {"s": schema},
        )
        row = await cur.fetchone()
    except psycopg.Error as exc:
        raise StoreError(describe(exc)) from exc
    return str(row["rolname"]) if row else None


async def can_create_roles(conn: Conn) -> bool:
    """Whether the connection's user may make roles (a superuser, or CREATEROLE)."""
    try:
        cur = await conn.execute(
            "SELECT rolsuper OR rolcreaterole AS can FROM pg_roles WHERE rolname = current_user"
        )
        row = await cur.fetchone()
    except psycopg.Error as exc:
        raise StoreError(describe(exc)) from exc
    return bool(row and row["can"])


SCRAM_ITERATIONS = 4096  # Postgres's default


def scram_verifier(password: str, salt: bytes | None = None) -> str:
    """The SCRAM-SHA-256 verifier Postgres stores for ``password`` (RFC 5802, as ``psql
    \\password`` sends it): the password itself never reaches the server, nor its logs."""
    salt = secrets.token_bytes(16) if salt is None else salt
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, SCRAM_ITERATIONS)
    client_key = hmac.digest(salted, b"Client Key", "sha256")
    stored_key = hashlib.sha256(client_key).digest()
    server_key = hmac.digest(salted, b"Server Key", "sha256")

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return f"SCRAM-SHA-256${SCRAM_ITERATIONS}:{b64(salt)}${b64(stored_key)}:{b64(server_key)}"


async def set_login(conn: Conn, user: str, group: str, password: str) -> None:
    """Make ``user`` a LOGIN member of ``group`` with ``password`` (made if missing, its
    password replaced if not), sent as its SCRAM verifier."""
    ident = sql.Identifier(user)
    try:
        async with conn.transaction():
            cur = await conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %(r)s", {"r": user})
            verb = "ALTER" if await cur.fetchone() else "CREATE"
            await conn.execute(
                sql.SQL(verb + " ROLE {} LOGIN PASSWORD {}").format(
                    ident, sql.Literal(scram_verifier(password))
                )
            )
            await conn.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(group), ident))
    except psycopg.Error as exc:
        raise StoreError(f"cannot set up the login {user}: {describe(exc)}") from exc
