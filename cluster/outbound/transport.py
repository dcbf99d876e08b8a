"""The HTTP client of every request Pulse sends to an address a user chose (``http:``
handlers, alert webhooks): its connections go only where the egress policy allows
(``cluster.config.egress``).

httpcore opens each connection through a network backend; ``GuardedBackend`` resolves the
host once, checks every address it got, and connects to an allowed one by address, so a
DNS answer that changes between check and connect (rebinding) cannot move it. TLS still
runs on the connection's hostname (httpcore gives it as SNI and the certificate is checked
against it), and the pool keys connections by hostname, so no request rides a connection
made for another name. Redirects are never followed; proxies from the environment are not
used (they would connect on the guard's behalf). A refused connection raises
``EgressRefused``, an ``httpx.ConnectError`` whose message names the host and the rule.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import httpcore
import httpx

from cluster.config.egress import Address, EgressPolicy, literal_address, refused_message

PolicySource = Callable[[], Awaitable[EgressPolicy]]

# httpcore's errors as httpx raises them (the same names), most specific first.
_ERRORS: tuple[tuple[type[Exception], type[httpx.TransportError]], ...] = (
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
)


class EgressRefused(httpx.ConnectError):
    """A connection the egress policy refuses."""


@contextmanager
def _mapped() -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        for theirs, ours in _ERRORS:
            if isinstance(exc, theirs):
                raise ours(str(exc)) from exc
        raise


async def resolve(host: str, port: int) -> list[Address]:
    """Every address ``host`` stands for, in the resolver's order, each once."""
    literal = literal_address(host)
    if literal is not None:
        return [literal]
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise httpx.ConnectError(f"cannot resolve {host}: {exc.strerror or exc}") from exc
    found: dict[Address, None] = {}
    for _family, _type, _proto, _name, sockaddr in infos:
        address = literal_address(str(sockaddr[0]))
        if address is not None:
            found[address] = None
    return list(found)


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """Connects only to addresses the policy allows, by address."""

    def __init__(self, policy: PolicySource) -> None:
        self._policy = policy
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's signature)
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        async with asyncio.timeout(timeout):
            addresses = await resolve(host, port)
            policy = await self._policy()
        allowed = [a for a in addresses if policy.refusal(a) is None]
        if not allowed:
            if not addresses:
                raise httpx.ConnectError(f"cannot resolve {host}: no address")
            first = addresses[0]
            raise EgressRefused(refused_message(host, first, policy.refusal(first) or ""))
        last: Exception | None = None
        for address in allowed:
            try:
                return await self._inner.connect_tcp(
                    str(address), port, timeout, local_address, socket_options
                )
            except httpcore.ConnectError as exc:
                last = exc
        assert last is not None
        raise last

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's signature)
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise EgressRefused("egress to a unix socket refused")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _Body(httpx.AsyncByteStream):
    def __init__(self, stream: Any) -> None:  # httpcore's response stream
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _mapped():
            async for part in self._stream:
                yield part

    async def aclose(self) -> None:
        await self._stream.aclose()


class GuardedTransport(httpx.AsyncBaseTransport):
    """httpx's transport over a connection pool whose backend is ``GuardedBackend``."""

    def __init__(self, policy: PolicySource, limits: httpx.Limits) -> None:
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=GuardedBackend(policy),
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        core = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with _mapped():
            answer = await self._pool.handle_async_request(core)
        return httpx.Response(
            status_code=answer.status,
            headers=answer.headers,
            stream=_Body(answer.stream),
            extensions=answer.extensions,
        )

    async def aclose(self) -> None:
        await self._pool.aclose()


def guarded_client(policy: PolicySource, *, max_connections: int = 100) -> httpx.AsyncClient:
    """A client whose every connection passes the egress guard; redirects not followed."""
    limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=20)
    transport = GuardedTransport(policy, limits)
    return httpx.AsyncClient(transport=transport, follow_redirects=False, trust_env=False)


def fixed(policy: EgressPolicy) -> PolicySource:
    """A policy source that always gives ``policy`` (a command reads the config once)."""

    async def source() -> EgressPolicy:
        return policy

    return source
