"""Least-privilege roles (``pulse init --roles``, cluster/store/schema/roles.py): made once and
granted again on every run; every table of the schema has its place in the grants; a
``pulse_web`` login and a ``pulse_node`` login do their jobs through the real store and a
real node process, and neither may alter or drop the schema, nor the web write runs, nor
the node read tokens."""

from __future__ import annotations

import asyncio
import base64
import os
import re
import secrets
import signal
import sys
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest

from cluster.jobs.spec import JobSpec
from cluster.local.logins import login_names
from cluster.local.processes import Command, pulse_env
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from cluster.store.lock.effects import EffectsStore
from cluster.store.schema.roles import GRANTS, scram_verifier
from cluster.timing.calendars import Calendar
from node.handlers.context import RunContext
from node.handlers.effects import Effects
from node.pipeline.clock import DbClock
from node.pipeline.completer import Completer
from node.pipeline.pacing import Pacing
from node.stats import Stats
from tests.helpers import REPO
from tests.helpers.cli import Invoke
from tests.helpers.nodes import Nodes
from tests.helpers.roles import PASSWORD, Logins, grant_roles, refused
from tests.helpers.sessions import ALL, OK, Opener, add_jobs, at
from tests.helpers.waiting import until
from tests.helpers.web import make_token, web_process

DENIED = "InsufficientPrivilege"
HANDLER = "cluster.chaos.witness:record"


def owner_rows(settings: ClusterSettings, statement: str) -> list[tuple[object, ...]]:
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {settings.schema}")
        cur = conn.execute(statement.encode())
        return cur.fetchall() if cur.description else []


def test_init_roles_makes_them_once_and_places_every_table(
    settings: ClusterSettings, initialised: Invoke, logins: Logins
) -> None:
    names = logins.names
    args = ["init", "--roles", "--node-role", names.node, "--web-role", names.web]
    args += ["--handler-role", names.handler]
    first = initialised(*args)
    assert first.exit_code == 0, first.output
    again = initialised(*args)
    assert again.exit_code == 0 and "made" not in again.output, again.output
    tables = {
        name
        for (name,) in owner_rows(
            settings,
            "SELECT relname FROM pg_class WHERE relnamespace = current_schema()::regnamespace"
            " AND relkind IN ('r', 'v')",
        )
    }
    assert tables == set(GRANTS)  # a new table needs its line in cluster/store/schema/roles.py
    bad = initialised("init", "--roles", "--node-role", "Robert'); DROP", "--web-role", "w")
    assert bad.exit_code == 2 and "node-role" in bad.output
    unset = initialised(*args, "--node-login", logins.node_user, PULSE_NODE_LOGIN_PASSWORD=None)
    assert unset.exit_code == 2 and "PULSE_NODE_LOGIN_PASSWORD" in unset.output
    login = initialised(*args, "--web-login", logins.web_user, PULSE_WEB_LOGIN_PASSWORD=PASSWORD)
    assert login.exit_code == 0 and PASSWORD not in login.output, login.output


async def test_the_web_role_changes_jobs_but_never_runs_nor_the_schema(
    settings: ClusterSettings, store: JobStore, logins: Logins
) -> None:
    await asyncio.to_thread(grant_roles, settings, logins)
    web = logins.as_web(settings)
    async with JobStore.open(web) as as_web:
        await as_web.definitions.add(JobSpec.build("rollup", "@hourly", HANDLER, tenant="a"))
        await as_web.pause("rollup", "a", note="as the web")
        await as_web.resume("rollup", "a")
        await as_web.tenants.set_limit("a", 3)
        await as_web.quotas.set("a", {"max_jobs": 5})
        await as_web.access.audit("t", "check", tenant="a", job=None, source=None)
        assert [j.name for j in await as_web.jobs()] == ["rollup"]
        await as_web.remove("rollup", "a")  # forgets its runs as the owner (migration 019)
    url, schema = web.database_url, settings.schema
    for statement in (
        "ALTER TABLE jobs ADD COLUMN evil int",
        "DROP TABLE runs",
        "TRUNCATE jobs",
        "CREATE TABLE mine (x int)",
        "INSERT INTO runs (job_id, tenant_id, job_name, scheduled_for, status)"
        " VALUES (gen_random_uuid(), 'a', 'x', now(), 'succeeded')",
        "UPDATE runs SET status = 'failed'",
        "DELETE FROM runs",
        "UPDATE config SET value = '*:*'",
        "INSERT INTO api_tokens (name, role, hash) VALUES ('x', 'admin', '\\x00')",
        "DELETE FROM api_audit",
    ):
        assert await asyncio.to_thread(refused, url, schema, statement) == DENIED, statement


async def test_the_web_role_takes_back_a_calendars_skips_ahead_when_it_drops_the_calendar(
    settings: ClusterSettings, store: JobStore, logins: Logins
) -> None:
    """A job applied over the API without its calendar any more runs the slots the calendar
    had recorded skipped ahead: the web's role deletes no runs itself, so it goes through
    withdraw_rule_skips, as the owner."""
    await asyncio.to_thread(grant_roles, settings, logins)
    today = (await store.db.db_now(None)).date()
    days = frozenset({today, today + timedelta(days=1)})
    await store.calendars.put(Calendar("closed", frozenset(range(7)), days))
    web = logins.as_web(settings)
    async with JobStore.open(web) as as_web:
        spec = JobSpec.build("rollup", "@every 1m", HANDLER, tenant="a", calendar="closed")
        await as_web.definitions.apply([spec])
        ahead = "SELECT count(*) FROM runs WHERE status = 'skipped' AND scheduled_for > now()"
        assert (await asyncio.to_thread(owner_rows, settings, ahead))[0][0] > 0
        await as_web.definitions.apply([JobSpec.build("rollup", "@every 1m", HANDLER, tenant="a")])
        job = await as_web.get("rollup", "a")
    assert (await asyncio.to_thread(owner_rows, settings, ahead))[0][0] == 0
    assert job.slot_at.date() <= today + timedelta(days=1), "the next minute, not past the days"


async def test_the_node_role_reads_no_token_and_alters_nothing(
    settings: ClusterSettings, store: JobStore, logins: Logins
) -> None:
    await asyncio.to_thread(grant_roles, settings, logins)
    url, schema = logins.as_node(settings).database_url, settings.schema
    for statement in (
        "ALTER TABLE runs ADD COLUMN evil int",
        "DROP TABLE jobs",
        "SELECT hash FROM api_tokens",
        "INSERT INTO api_audit (token_name, action) VALUES ('x', 'y')",
        "UPDATE config SET value = '*:*'",
        "SELECT * FROM tenant_quotas",
    ):
        assert await asyncio.to_thread(refused, url, schema, statement) == DENIED, statement


def test_a_node_logged_in_through_the_node_role_claims_and_completes_runs(
    settings: ClusterSettings, logins: Logins, tmp_path: Path
) -> None:
    async def init() -> None:
        async with JobStore.open(settings) as owner:
            await owner.init(16)
            await owner.definitions.add(JobSpec.build("tick", "@every 1s", HANDLER))

    asyncio.run(init())
    grant_roles(settings, logins)
    nodes = Nodes(logins.as_node(settings), tmp_path)
    try:
        nodes.start("n1")

        def succeeded() -> int:
            rows = owner_rows(settings, "SELECT count(*) FROM runs WHERE status = 'succeeded'")
            nodes.check_alive()
            return int(str(rows[0][0]))

        until(lambda: succeeded() >= 2, "two runs completed by the node role", 30)
        assert nodes.stop("n1") == 0
        assert "permission denied" not in nodes.logs()
    finally:
        nodes.close()


def test_pulse_web_logged_in_through_the_web_role_serves_the_api(
    settings: ClusterSettings, initialised: Invoke, logins: Logins, tmp_path: Path
) -> None:
    assert initialised("config", "set", "api.handlers", HANDLER).exit_code == 0
    grant_roles(settings, logins)
    token = make_token(settings, "ops", "admin")
    with web_process(logins.as_web(settings), tmp_path) as web, web.client(token) as api:
        job = {"name": "tick", "tenant": "a", "schedule": "@hourly", "handler": HANDLER}
        assert api.post("/api/jobs", json=job).status_code == 201
        assert api.post("/api/jobs/a/tick/pause", json={"note": "web role"}).status_code == 200
        assert api.post("/api/jobs/a/tick/resume").status_code == 200
        backfill = {"from": "2026-01-01T00:00:00Z", "to": "2026-01-01T03:00:00Z"}
        made = api.post("/api/jobs/a/tick/backfill", json=backfill)
        assert made.status_code == 201, made.text
        assert api.post(f"/api/backfills/{made.json()['id']}/cancel").status_code == 200
        assert api.put("/api/tenants/a/limit", json={"max_concurrent": 2}).status_code == 200
        assert api.put("/api/tenants/a/quota", json={"max_jobs": 9}).status_code == 200
        for path in (
            "/api/jobs",
            "/api/runs",
            "/api/backfills",
            "/api/tokens/audit",
            "/api/status",
            "/api/audit?from=2031-01-01T00:00:00Z&to=2031-01-02T00:00:00Z",
        ):
            assert api.get(path).status_code == 200, path
        assert api.delete("/api/jobs/a/tick").status_code == 204
        assert [a for (a,) in owner_rows(settings, "SELECT action FROM api_audit ORDER BY id")]
        log = web.log()
    assert "permission denied" not in log and "store error" not in log, log


async def test_a_handlers_transaction_runs_as_the_handler_role(
    settings: ClusterSettings, store: JobStore, open_session: Opener, logins: Logins
) -> None:
    """The handler's statements run as the handler role, which reaches its own table but
    none of Pulse's; the run's completion in the same transaction runs as the node."""
    await asyncio.to_thread(grant_roles, settings, logins)
    table = f"app_{secrets.token_hex(4)}"
    owner_rows(settings, f"CREATE TABLE public.{table} (slot timestamptz)")
    owner_rows(settings, f"GRANT SELECT, INSERT ON public.{table} TO {logins.names.handler}")
    try:
        await add_jobs(store, 1)
        a = await open_session("node-a")
        (job,) = (await a.claim(ALL, 10, 30.0, now=at(10))).jobs
        node = logins.as_node(settings)
        effects = Effects(EffectsStore(node, "node-a", "z", logins.names.handler))
        clock = DbClock()
        completer = Completer(
            a.completions, clock, Stats(), asyncio.Event(), Pacing(clock), effects
        )
        ctx = RunContext(
            job_id=job.id,
            job_name=job.name,
            tenant_id=job.tenant,
            payload={},
            scheduled_for=job.slot,
            attempt=job.attempt,
            timeout_s=30.0,
            node_id="node-a",
            zone="z",
            fencing_token=job.lease_token,
            effects=effects,
        )
        async with ctx.transaction() as conn:
            await conn.execute(f"INSERT INTO public.{table} VALUES (%s)".encode(), (job.slot,))
            cur = await conn.execute("SELECT current_user AS who")
            assert (await cur.fetchone()) == {"who": logins.names.handler}
        completer.run_done(job, OK)
        stop = asyncio.Event()
        stop.set()
        await asyncio.wait_for(completer.run(stop), 10)
        assert owner_rows(settings, f"SELECT slot FROM public.{table}") == [(job.slot,)]
        assert (await store.get(job.name)).slot_at > job.slot  # completed, as the node

        schema = settings.schema
        for statement in (f"UPDATE {schema}.jobs SET paused = true", f"DELETE FROM {schema}.runs"):
            conn = await effects.store.open(5.0)
            try:
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    await conn.execute(statement.encode())
            finally:
                await conn.close()
    finally:
        owner_rows(settings, f"DROP TABLE public.{table}")


def test_pulse_up_with_roles_runs_its_nodes_and_web_as_their_logins(
    settings: ClusterSettings, logins: Logins, tmp_path: Path
) -> None:
    asyncio.run(_with_job(settings))
    names = logins.names
    env = pulse_env(
        settings,
        PULSE_NODE_ROLE=names.node,
        PULSE_WEB_ROLE=names.web,
        PULSE_HANDLER_ROLE=names.handler,
        PULSE_WITNESS_FILE=str(tmp_path / "witness.jsonl"),
    )
    argv = [sys.executable, "-m", "node", "up", "--nodes", "1", "--roles", "--no-web"]
    log = tmp_path / "up.log"
    proc = Command(argv, env, REPO).start("pulse up", log).proc
    node_user, _ = login_names(names)
    try:

        def users() -> set[str]:
            if proc.poll() is not None:
                raise AssertionError(f"pulse up exited:\n{log.read_text()}")
            rows = owner_rows(
                settings,
                "SELECT DISTINCT usename FROM pg_stat_activity WHERE application_name = 'a-1'",
            )
            return {str(u) for (u,) in rows}

        until(lambda: users() == {node_user}, "a-1 logged in as its login", 30)
        until(
            lambda: owner_rows(settings, "SELECT 1 FROM runs WHERE status = 'succeeded'"),
            "a run completed",
            30,
        )
        assert not re.search(r"://[^@/\s]*:(?!\*\*\*@)[^@/\s]*@", log.read_text())  # masked
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(60) == 0, log.read_text()
    text = log.read_text()
    assert f"nodes log in as {node_user}" in text and "permission denied" not in text, text


async def _with_job(settings: ClusterSettings) -> None:
    async with JobStore.open(settings) as owner:
        await owner.init(16)
        await owner.definitions.add(JobSpec.build("tick", "@every 1s", HANDLER))


def test_a_login_password_is_sent_as_the_verifier_postgres_would_store(
    settings: ClusterSettings,
) -> None:
    """Postgres stores the same verifier for the plain password as the one Pulse sends, so
    the plain password never reaches the server (nor a log of its statements)."""
    user = f"pulse_verifier_{secrets.token_hex(4)}"
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {user} LOGIN PASSWORD 'hunter2-ü'".encode())
        try:
            row = conn.execute(
                "SELECT rolpassword FROM pg_authid WHERE rolname = %s", (user,)
            ).fetchone()
        finally:
            conn.execute(f"DROP ROLE {user}".encode())
    assert row is not None
    stored = str(row[0])
    salt = base64.b64decode(stored.split("$")[1].split(":")[1])
    assert scram_verifier("hunter2-ü", salt) == stored
