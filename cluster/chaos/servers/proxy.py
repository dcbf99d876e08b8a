"""A controllable TCP proxy between one node and one server (Postgres or Redis).

Modes:

* ``pass``: bytes flow both ways.
* ``cut``: every connection is reset at once and new ones are closed on arrival, as when
  a firewall rejects the node's traffic: both ends see the failure immediately.
* ``stall``: nothing is forwarded and nothing is closed, as when a network drops packets
  silently (no FIN, no RST): a read that was already taken is held back, a server that
  closes its side is not reported to the client, and new connections hang before reaching
  the server. When the stall ends everything held is delivered, as TCP retransmission
  would after a partition heals, including the close of a session the server ended.

``stall_on(marker)`` stalls the moment the server answers with bytes that hold ``marker``,
before that answer is forwarded: the statement ran, and its answer is held with the rest
(tests/integration/test_lost_answers.py).
"""

from __future__ import annotations

import asyncio

CHUNK = 65536
CONNECT_TIMEOUT_S = 5.0


class _Link:
    """One client connection and its upstream connection."""

    def __init__(self, client: asyncio.StreamWriter) -> None:
        self.client = client
        self.upstream: asyncio.StreamWriter | None = None
        self.closed = False

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for writer in (self.client, self.upstream):
            if writer is not None:
                writer.transport.abort()


class Proxy:
    """Listens on 127.0.0.1 (a free port) and forwards to ``upstream``."""

    def __init__(self, name: str, upstream: tuple[str, int]) -> None:
        self.name = name
        self.upstream = upstream
        self.port = 0
        self.mode = "pass"
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._links: set[_Link] = set()
        self._server: asyncio.Server | None = None
        self._marker: bytes | None = None
        self.tripped = asyncio.Event()  # set when ``stall_on``'s marker stalled the proxy

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def cut(self) -> None:
        self.mode = "cut"
        for link in list(self._links):
            link.close()
        self._flowing.set()  # held pumps wake up, see their link closed, and end

    def stall(self) -> None:
        self.mode = "stall"
        self._flowing.clear()

    def stall_on(self, marker: bytes) -> None:
        """Stall once an answer from the server holds ``marker`` (``tripped`` is set then)."""
        self.tripped.clear()
        self._marker = marker

    def restore(self) -> None:
        self.mode = "pass"
        self._flowing.set()

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        link = _Link(writer)
        if self.mode == "cut":
            link.close()
            return
        self._links.add(link)
        try:
            await self._flowing.wait()  # a stalled network never answers the handshake
            if self.mode == "cut" or link.closed:
                return
            try:
                up_reader, up_writer = await asyncio.wait_for(
                    asyncio.open_connection(*self.upstream), CONNECT_TIMEOUT_S
                )
            except (OSError, TimeoutError):
                return
            link.upstream = up_writer
            if link.closed:  # cut while connecting
                up_writer.transport.abort()
                return
            await asyncio.gather(
                self._pump(link, reader, up_writer), self._pump(link, up_reader, writer)
            )
        finally:
            link.close()
            self._links.discard(link)

    async def _pump(
        self, link: _Link, source: asyncio.StreamReader, sink: asyncio.StreamWriter
    ) -> None:
        try:
            while not link.closed:
                data = await source.read(CHUNK)
                if self._marker is not None and sink is link.client and self._marker in data:
                    self._marker = None
                    self.stall()
                    self.tripped.set()
                await self._flowing.wait()
                if link.closed or not data:
                    return
                sink.write(data)
                await sink.drain()
        except (OSError, asyncio.IncompleteReadError):
            return
        finally:
            link.close()
