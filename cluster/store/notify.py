"""LISTEN/NOTIFY wake-ups: admin writes notify the job's shard; claim loops listen.

The listener uses its own connection (named ``<node id>/listen`` so it never counts as the
node's lock session) and only wakes the claim loop early: losing it delays nothing beyond
the poll interval. It reads the socket only when the event loop sees it readable, so an
idle listener costs nothing (psycopg's ``notifies()`` wakes up ten times a second to
check for interrupts: about a third of an idle node's CPU).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import pq, sql

from cluster.errors import StoreError
from cluster.settings import ClusterSettings
from cluster.store.connect import connect, describe


async def listen(
    settings: ClusterSettings,
    node_id: str,
    on_notify: Callable[[str], None],
    stop: asyncio.Event,
) -> None:
    """Call ``on_notify(payload)`` for each wake-up until ``stop``; StoreError if it breaks."""
    conn = await connect(settings, f"{node_id}/listen"[:63])
    loop = asyncio.get_running_loop()
    broken: asyncio.Future[Any] = loop.create_future()
    fd = -1
    try:
        await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(settings.wake_channel)))
        pgconn, encoding = conn.pgconn, conn.info.encoding

        def readable() -> None:
            try:
                pgconn.consume_input()
                if pgconn.status != pq.ConnStatus.OK:
                    raise psycopg.OperationalError("the connection is broken")
                while (note := pgconn.notifies()) is not None:
                    on_notify(note.extra.decode(encoding))
            except psycopg.Error as exc:
                loop.remove_reader(fd)
                if not broken.done():
                    broken.set_exception(exc)

        fd = pgconn.socket
        loop.add_reader(fd, readable)
        stopping: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait([stopping, broken], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        if broken.done():
            broken.result()
    except psycopg.Error as exc:
        raise StoreError(f"wake-up listener: {describe(exc)}") from exc
    finally:
        if fd >= 0:
            loop.remove_reader(fd)
        with contextlib.suppress(TimeoutError, psycopg.Error, OSError):
            await asyncio.wait_for(conn.close(), 2.0)
