"""LISTEN/NOTIFY wake-ups: admin writes notify the job's shard; claim loops listen.

The listener uses its own connection (named ``<node id>/listen`` so it never counts as the
node's lock session) and only wakes the claim loop early: losing it delays nothing beyond
the poll interval.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import psycopg
from psycopg import sql

from cluster.db import connect, describe
from cluster.errors import StoreError
from cluster.settings import ClusterSettings


async def listen(
    settings: ClusterSettings,
    node_id: str,
    on_notify: Callable[[str], None],
    stop: asyncio.Event,
) -> None:
    """Call ``on_notify(payload)`` for each wake-up until ``stop``; StoreError if it breaks."""
    conn = await connect(settings, f"{node_id}/listen"[:63])
    try:
        await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(settings.wake_channel)))
        while not stop.is_set():
            async for note in conn.notifies(timeout=1.0):
                on_notify(note.payload)
    except psycopg.Error as exc:
        raise StoreError(f"wake-up listener: {describe(exc)}") from exc
    finally:
        with contextlib.suppress(TimeoutError, psycopg.Error, OSError):
            await asyncio.wait_for(conn.close(), 2.0)
