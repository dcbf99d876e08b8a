"""A TCP relay to Postgres that a test can cut, as a network partition would."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit


class Partition:
    """A TCP relay to Postgres that stops passing bytes either way when ``cut`` is set, as a
    network partition does (new connections, a cancel request's too, are accepted and
    then hear nothing)."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self._upstream = (parts.hostname or "127.0.0.1", parts.port or 5432)
        self._url = parts
        self.cut = False
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> str:
        """The URL that goes through the relay."""
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        netloc = self._url.netloc.rsplit("@", 1)
        host = f"127.0.0.1:{port}"
        return self._url._replace(
            netloc=f"{netloc[0]}@{host}" if len(netloc) > 1 else host
        ).geturl()

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for pipe in self._pipes:
            pipe.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self._upstream)
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            pipe = asyncio.create_task(self._pipe(source, sink))
            self._pipes.add(pipe)
            pipe.add_done_callback(self._pipes.discard)

    async def _pipe(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while data := await source.read(65536):
                if not self.cut:
                    sink.write(data)
                    await sink.drain()
        finally:
            sink.close()
