"""A real ``pulse web`` process for tests, started like a node (``cluster.local.processes``):
against one test's schema, its output in a log file, never outliving the test."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg

from cluster.local.processes import Command, Process, free_port, pulse_env
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from cluster.web.tokens import new_token, token_hash
from tests.helpers import REPO
from tests.helpers.databases import fresh_settings
from tests.helpers.waiting import until


@dataclass
class Web:
    process: Process
    url: str

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=10)

    def log(self) -> str:
        return "\n".join(self.process.lines())


@contextlib.contextmanager
def web_process(settings: ClusterSettings, workdir: Path, *options: str) -> Iterator[Web]:
    """Start ``pulse web`` on a free port; yield once it answers /api/health."""
    port = free_port()
    argv = (sys.executable, "-m", "node", "web", "--bind", f"127.0.0.1:{port}", *options)
    log = workdir / f"web-{port}.log"
    process = Command(argv, pulse_env(settings), REPO).start("web", log)
    web = Web(process, f"http://127.0.0.1:{port}")

    def up() -> bool:
        if not process.running:
            raise AssertionError(f"pulse web exited:\n{process.tail()}")
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"{web.url}/api/health", timeout=2).status_code == 200
        return False

    try:
        until(up, "pulse web to answer", 30)
        yield web
    finally:
        process.signal(signal.SIGTERM)
        if process.wait(10) is None:
            process.signal(signal.SIGKILL)
            process.wait(10)


def make_token(settings: ClusterSettings, name: str, role: str, tenant: str | None = None) -> str:
    """Create a token as ``pulse tokens create`` does; the secret."""
    secret = new_token()

    async def go() -> None:
        async with JobStore.open(settings) as store:
            await store.access.create_token(name, role, token_hash(secret), tenant=tenant)

    asyncio.run(go())
    return secret


def cookie_attributes(response: httpx.Response) -> set[str]:
    """The attribute names of the response's Set-Cookie (``httponly``, ``secure``, ...), never
    its value: a random session id may hold any short string."""
    parts = response.headers["set-cookie"].split(";")[1:]
    return {part.split("=", 1)[0].strip().lower() for part in parts}


@dataclass
class Api:
    """A running ``pulse web`` on its own schema, with tokens of each role by name:
    ``admin``, ``write``, ``read`` and ``acme`` (write, scoped to tenant acme)."""

    settings: ClusterSettings
    web: Web
    tokens: dict[str, str]

    def as_(self, who: str) -> httpx.Client:
        return self.web.client(self.tokens[who])

    def set_config(self, key: str, value: str) -> None:
        async def go() -> None:
            async with JobStore.open(self.settings) as store:
                await store.set_config(key, value)

        asyncio.run(go())

    def sql(self, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.settings.database_url, autocommit=True) as conn:
            conn.execute(f"SET search_path TO {self.settings.schema}")
            cur = conn.execute(statement.encode(), params)
            return cur.fetchall() if cur.description else []


@contextlib.contextmanager
def api_cluster(database_url: str, workdir: Path, *options: str) -> Iterator[Api]:
    """A fresh schema, its tokens and a ``pulse web`` serving it, believing forwarded
    headers from loopback unless ``options`` say otherwise."""
    settings = fresh_settings(database_url)

    async def init() -> None:
        async with JobStore.open(settings) as store:
            await store.init(16)

    asyncio.run(init())
    tokens = {
        "admin": make_token(settings, "ops", "admin"),
        "write": make_token(settings, "deployer", "write"),
        "read": make_token(settings, "viewer", "read"),
        "acme": make_token(settings, "acme-writer", "write", tenant="acme"),
    }
    # The tests' clients stand for browsers behind a proxy on this host; a later option wins.
    trusting = ("--forwarded-allow-ips", "127.0.0.1,::1")
    with web_process(settings, workdir, *trusting, *options) as web:
        yield Api(settings, web, tokens)
