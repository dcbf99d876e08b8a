"""LISTEN/NOTIFY wake-ups: admin writes notify the job's shard; claim loops listen. A
request to cancel a run goes the same way, as ``cancel:<job id>:<lease token>:<slot>:<who>``
(the slot, in microseconds since the epoch, only for a flight of an overlap ``allow`` job),
a tenant at its limit of concurrent runs getting a place back as ``tenant``, and a queued
alert delivery as ``alerts``.

The listener uses its own connection (named ``<node id>/listen`` so it never counts as the
node's lock session) and only wakes the claim loop early: losing it delays nothing beyond
the poll interval. It waits for its socket to turn readable rather than in psycopg's
``notifies()``, which wakes ten times a second: an idle node would pay for each wake-up.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import datetime

import psycopg
from psycopg import sql

from cluster.errors import StoreError
from cluster.settings import ClusterSettings
from cluster.store import tally
from cluster.store.connect import connect, describe
from cluster.timing.instants import from_micros, micros

CANCEL_PREFIX = "cancel:"
# Sent by the place triggers of migration 014 when a tenant at its limit gets a place back.
TENANT_PLACE_FREED = "tenant"
# Sent by limit_free (0.3.0_pre_uses_named_limits) when a named limit at its cap gets a place back.
LIMIT_PLACE_FREED = "limit"
# Sent by raise_alert (migration 028) when it queued a delivery: the alert outbox has work.
ALERT_QUEUED = "alerts"
# Sent by `spawn` when it fanned an each-node slot out to other members (their runs queued).
MEMBER_RUNS = "members"


def slot_text(slot: datetime) -> str:
    """A slot in a cancel request: whole microseconds since the epoch (no colons)."""
    return str(micros(slot))


def slot_of(text: str) -> datetime:
    return from_micros(int(text))


async def listen(
    settings: ClusterSettings,
    node_id: str,
    on_notify: Callable[[str], None],
    stop: asyncio.Event,
) -> None:
    """Call ``on_notify(payload)`` for each wake-up until ``stop``; StoreError if it breaks."""
    conn = await connect(settings, f"{node_id}/listen"[:63])
    loop = asyncio.get_running_loop()
    stopping = asyncio.ensure_future(stop.wait())
    try:
        conn.add_notify_handler(lambda note: on_notify(note.payload))
        statement = sql.SQL("LISTEN {}").format(sql.Identifier(settings.wake_channel))
        await conn.execute(statement)
        fd = conn.fileno()
        while True:
            readable: asyncio.Future[None] = loop.create_future()
            loop.add_reader(fd, _resolve, readable)
            try:
                await asyncio.wait((readable, stopping), return_when=asyncio.FIRST_COMPLETED)
            finally:
                loop.remove_reader(fd)
            if stopping.done():
                return
            # The server sent notifications (psycopg hands them to the handler as this
            # round trip reads them; LISTEN again is a no-op) or ended the connection.
            tally.count("listen", "listen")
            await conn.execute(statement)
    except psycopg.Error as exc:
        raise StoreError(f"wake-up listener: {describe(exc)}") from exc
    finally:
        stopping.cancel()
        with contextlib.suppress(TimeoutError, psycopg.Error, OSError):
            await asyncio.wait_for(conn.close(), 2.0)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
