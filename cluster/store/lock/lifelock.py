"""Life locks: how a node learns at once that a peer's lock session has ended.

Every node's lock session holds an advisory lock of its own, keyed by its node id, for as
long as it lives (``life_key``). A peer that asks for that lock on a connection of its own
(``LifeWatch``) is granted it the moment the session ends: Postgres releases a dead
backend's locks as it exits, so a killed node is noticed in milliseconds rather than at
the next poll of ``pg_stat_activity``. The watcher releases the lock again at once; a
grant says only "that session ended", and the shard keeper decides whether that is a
death or a blip (docs/design/recovery.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging

import psycopg
from psycopg import pq

from cluster.errors import StoreError
from cluster.settings import ClusterSettings
from cluster.store import tally
from cluster.store.connect import Conn, connect, describe
from cluster.store.queries import query

logger = logging.getLogger(__name__)

# Keys below every start-up probe (-pid, and Linux pids stay under 2^22) and every shard.
_PROBES = 1 << 22
_SPAN = (1 << 31) - _PROBES - 1
# The client's own deadline beyond the server's lock_timeout (a stalled network).
_MARGIN_S = 5.0
_LOCK_NOT_AVAILABLE = b"55P03"  # the lock_timeout passed


# Below every life key: the shared lock every lock session of a node that knows every-node
# jobs holds (session.sql: lock_session_setup; docs/design/each-node.md#rolling-upgrades).
EACH_NODE_MARK = -(1 << 31)


def life_key(node_id: str) -> int:
    """The second key of ``node_id``'s life lock (the first is the cluster's namespace)."""
    digest = hashlib.blake2b(node_id.encode(), digest_size=8).digest()
    return -(_PROBES + int.from_bytes(digest, "big") % _SPAN)


class LifeWatch:
    """One connection (``<node>/watch``) that waits for peers' life locks."""

    def __init__(self, settings: ClusterSettings, node_id: str) -> None:
        self._settings = settings
        self._name = f"{node_id}/watch"
        self._namespace = settings.lock_namespace
        self._conn: Conn | None = None
        self._wait_ms = 0

    async def wait_gone(self, peer: str, wait_s: float) -> bool:
        """True once ``peer``'s lock session has ended (or it holds no life lock); False
        after ``wait_s`` with the session still there."""
        params = {"ns": self._namespace, "key": life_key(peer)}
        try:
            conn = await self._connection(wait_s)
            tally.count("watch", "await_life_lock")
            if not await _granted(conn, query("await_life_lock"), params, wait_s + _MARGIN_S):
                return False
            tally.count("watch", "release_life_lock")
            await asyncio.wait_for(conn.execute(query("release_life_lock"), params), _MARGIN_S)
            return True
        except (psycopg.Error, OSError, TimeoutError) as exc:
            await self.close()
            raise StoreError(f"life watch: {describe(exc)}") from exc

    async def _connection(self, wait_s: float) -> Conn:
        wait_ms = int(wait_s * 1000)
        if self._conn is None or self._conn.closed or wait_ms != self._wait_ms:
            await self.close()
            timeout_s = wait_s + _MARGIN_S
            self._conn = await connect(self._settings, self._name, statement_timeout_s=timeout_s)
            await self._conn.execute(query("life_watch_setup"), {"ms": str(wait_ms)})
            self._wait_ms = wait_ms
        return self._conn

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.closed:
            with contextlib.suppress(psycopg.Error, OSError, TimeoutError):
                await asyncio.wait_for(conn.close(), 1.0)


async def _granted(conn: Conn, statement: bytes, params: dict[str, int], wait_s: float) -> bool:
    """Run the lock wait ``statement``; True once granted, False at its ``lock_timeout``.

    psycopg waits for a statement's answer in slices of 0.1 s, so a node would wake ten
    times a second for as long as it watches (docs/design/driver.md, the listener). So
    the statement is sent through the connection's libpq handle, and the answer read once
    the socket turns readable: an idle watch wakes nobody."""
    pg = conn.pgconn
    text = psycopg.AsyncClientCursor(conn).mogrify(statement, params)
    pg.send_query(text.encode())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while pg.flush():
        await _ready(loop, conn.fileno(), deadline, write=True)
    pg.consume_input()
    while pg.is_busy():
        await _ready(loop, conn.fileno(), deadline, write=False)
        pg.consume_input()
    results = []
    while (result := pg.get_result()) is not None:
        results.append(result)
    for result in results:
        if result.status == pq.ExecStatus.FATAL_ERROR:
            state = result.error_field(pq.DiagnosticField.SQLSTATE)
            if state == _LOCK_NOT_AVAILABLE:
                return False
            message = (result.error_message or b"").decode(errors="replace").strip()
            raise psycopg.OperationalError(message or "lock wait failed")
    return True


async def _ready(loop: asyncio.AbstractEventLoop, fd: int, deadline: float, *, write: bool) -> None:
    """Wait until ``fd`` is readable (or writable); TimeoutError at ``deadline``."""
    ready: asyncio.Future[None] = loop.create_future()

    def resolve() -> None:
        if not ready.done():
            ready.set_result(None)

    (loop.add_writer if write else loop.add_reader)(fd, resolve)
    try:
        await asyncio.wait_for(ready, max(0.0, deadline - loop.time()))
    finally:
        (loop.remove_writer if write else loop.remove_reader)(fd)
