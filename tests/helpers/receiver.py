"""A real HTTP receiver for alert and http: handler tests: records every request (any of
GET, POST, PUT, PATCH, DELETE), and can answer 500, be slow, or be down (stopped, then
started again on the same port); ``routes`` answer chosen paths their own way. It listens on
127.0.0.1, which the egress guard refuses by default: ``allow_local`` opens loopback for a
test's nodes and commands, ``local_config`` for a service built in the test."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cluster.alerts.rules import standard_signature
from cluster.config.egress import EGRESS_ALLOW
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore


@dataclass(frozen=True)
class Request:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float
    status: int  # what it was answered with
    method: str = "POST"

    def json(self) -> Any:
        return json.loads(self.body)

    def signed_with(self, secret: str) -> bool:
        """Whether its Standard Webhooks signature is ``secret``'s over its id, time and body."""
        expected = standard_signature(
            self.body, secret, self.headers["webhook-id"], int(self.headers["webhook-timestamp"])
        )
        return self.headers.get("webhook-signature") == expected


@dataclass(frozen=True)
class Route:
    status: int = 200
    delay_s: float = 0.0
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()  # e.g. (("Location", url),) with a 302


@dataclass
class Receiver:
    """``url`` accepts requests; ``status`` and ``delay_s`` say how it answers, or the
    ``routes`` entry of the request's path."""

    status: int = 200
    delay_s: float = 0.0
    routes: dict[str, Route] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    port: int = 0
    host: str = "127.0.0.1"  # another loopback address (127.0.0.2) stands in for a remote host
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/hook"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                route = receiver.routes.get(self.path.partition("?")[0])
                if route is None:
                    route = Route(receiver.status, receiver.delay_s)
                headers = dict(self.headers.items())
                found = Request(self.path, headers, body, time.time(), route.status, self.command)
                with receiver._lock:
                    receiver.requests.append(found)
                if route.delay_s:
                    time.sleep(route.delay_s)
                self.send_response(route.status)
                self.send_header("Content-Length", str(len(route.body)))
                for name, value in route.headers:
                    self.send_header(name, value)
                self.end_headers()
                if route.body:
                    self.wfile.write(route.body)

            do_GET = do_PUT = do_PATCH = do_DELETE = do_POST

            def log_message(self, format: str, *args: Any) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer((self.host, self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    def received(self) -> list[Request]:
        with self._lock:
            return list(self.requests)

    def accepted(self) -> list[Request]:
        """Requests answered with a 2xx (the ones a sender may count as delivered)."""
        return [r for r in self.received() if 200 <= r.status < 300]


@contextlib.contextmanager
def receiver(**kwargs: Any) -> Any:
    r = Receiver(**kwargs).start()
    try:
        yield r
    finally:
        r.stop()


LOCAL = {EGRESS_ALLOW: "127.0.0.0/8"}


def allow_local(settings: ClusterSettings) -> None:
    """``pulse config set egress.allow 127.0.0.0/8`` on the test's cluster."""

    async def go() -> None:
        async with JobStore.open(settings) as store:
            await store.set_config(EGRESS_ALLOW, LOCAL[EGRESS_ALLOW])

    asyncio.run(go())


async def local_config() -> Mapping[str, str]:
    """A ``config`` source for a service built in a test: loopback allowed."""
    return LOCAL
