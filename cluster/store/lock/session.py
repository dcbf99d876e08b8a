"""The node's lock session: one dedicated Postgres connection that is the node's authority.

Shard advisory locks live on this session, so if it drops the node owns nothing. Claims,
renewals, releases and recoveries of jobs, and of flights (its ``flights`` part), and the
zone spaces and each-zone children (its ``zones`` part) run on the same session (a node
whose session was terminated cannot claim); a node writes completions on its result
writer. ``idle_session_timeout`` makes Postgres end the session of a frozen
or partitioned node by itself. Every call has a deadline; a timeout or a connection error
marks the session lost, and the caller drops its shards at once. The node's heartbeat
reports how long it has gone without any answer (docs/design/lock-session.md).

The session runs a few statements thousands of times, so psycopg prepares each on the
server at first use; it runs in autocommit and never rolls back, so psycopg never
deallocates them (docs/design/driver.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg
from psycopg import AsyncCursor
from psycopg.rows import AsyncRowFactory, dict_row, tuple_row

from cluster.errors import ConfigError, StoreError
from cluster.settings import DEFAULT_LEASE_S, ClusterSettings
from cluster.store import tally
from cluster.store.connect import Conn, connect, describe
from cluster.store.deadline import MARGIN_S, fetch_within
from cluster.store.lock.completions import Completions
from cluster.store.lock.flights import FlightLease, Flights
from cluster.store.lock.lifelock import EACH_NODE_MARK, life_key
from cluster.store.lock.peers import Peers
from cluster.store.lock.records import ClaimResult, claimed_jobs, int_array
from cluster.store.lock.tenantlist import NO_PAIRS, TenantList
from cluster.store.lock.zones import Zones
from cluster.store.queries import query, variant
from cluster.store.schema.migrate import check_schema, stored_shard_count

logger = logging.getLogger(__name__)

__all__ = ["LockSession", "SessionLost"]


class SessionLost(StoreError):
    """The lock session is gone (or cannot be trusted): every shard lock with it."""


def claim_params(
    shards: Collection[int],
    limit: int,
    lease_s: float,
    node_id: str,
    zone: str | None,
    now: datetime | None = None,
    ahead_s: float = 0.0,
    pairs: dict[str, Any] = NO_PAIRS,
) -> dict[str, Any]:
    """The parameters of the ``claim`` statement (its ``fair`` flag is written into the
    text: ``queries.variant``); ``pairs``: the tenant list of a fair claim (tenantlist.py)."""
    return {
        **pairs,
        "shards": int_array(shards),
        "limit": limit,
        # Each shard's heads: a little more than its even share of the claim.
        "quota": -(-limit // max(len(shards), 1)) + 1,
        "lease_s": lease_s,
        "ahead_s": ahead_s,
        "node_id": node_id,
        "zone": zone,
        "now": now,
    }


def _leases(leases: Sequence[tuple[UUID, int]]) -> dict[str, list[Any]]:
    """The ids and lease tokens of ``leases``, as the lease statements take them."""
    return {"ids": [i for i, _ in leases], "tokens": [t for _, t in leases]}


class LockSession:
    def __init__(
        self,
        settings: ClusterSettings,
        node_id: str,
        zone: str,
        *,
        session_timeout_s: float,
        statement_timeout_s: float,
        on_lost: Callable[[], None] | None = None,
    ) -> None:
        self.settings = settings
        self._on_lost = on_lost
        self.node_id = node_id
        self.zone = zone
        self.session_timeout_s = session_timeout_s
        self.statement_timeout_s = statement_timeout_s
        self.namespace = settings.lock_namespace
        self._conn: Conn | None = None
        self._cur: AsyncCursor[Any] | None = None  # kept: it keeps its column loaders
        self._lock = asyncio.Lock()
        self.last_ok = 0.0  # monotonic time of the last successful round trip
        self._unanswered_since: float | None = None  # sent when; kept across reconnects
        self.generation = 0  # bumps on every new connection
        self.life_locked = False  # this session holds the node's life lock (lifelock.py)
        self.flights = Flights(self._run, node_id, zone)
        # A node writes its completions on the result writer; tests, on the session too.
        self.completions = Completions(self._run, node_id, zone)
        self.zones = Zones(self._run)
        self.peers = Peers(self._run)
        self.tenants = TenantList(self._run)

    @property
    def connected(self) -> bool:
        return self._conn is not None and not self._conn.closed

    def unanswered_s(self) -> float:
        """How long Postgres has given this session no answer at all, not even an error (a
        reset, a refusal, a restart's close): only a stall leaves it unanswered."""
        since = self._unanswered_since
        return 0.0 if since is None else max(0.0, time.monotonic() - since)

    def trusted(self, margin_s: float) -> bool:
        """True while Postgres cannot yet have ended this session for idleness."""
        return self.connected and time.monotonic() - self.last_ok < (
            self.session_timeout_s - margin_s
        )

    async def open(self, expected_shards: int | None = None) -> int:
        """Connect, check the guarantees hold (the first time, the schema's version too),
        and return the database's shard count."""
        await self.close()
        conn = await connect(
            self.settings,
            self.node_id,
            statement_timeout_s=self.statement_timeout_s,
            idle_session_timeout_s=self.session_timeout_s,
            prepare_threshold=0,
        )
        try:
            shards = await asyncio.wait_for(stored_shard_count(conn), self.statement_timeout_s)
            if self.generation == 0:
                # At start only: a node already running keeps working across a migration
                # of a rolling upgrade (docs/design/schema.md).
                await asyncio.wait_for(check_schema(conn), self.statement_timeout_s)
            if expected_shards is not None and expected_shards != shards:
                raise ConfigError(
                    f"this node was started with --shards {expected_shards} but the database "
                    f"has {shards}; the shard count never changes"
                )
            # The mark first: the probe below must not show this session as an old node's.
            await conn.execute(
                query("lock_session_setup"), {"ns": self.namespace, "mark": EACH_NODE_MARK}
            )
            await self._check_session_locks(conn)
        except BaseException:
            await conn.close()
            raise
        self._conn, self._cur = conn, conn.cursor(row_factory=tuple_row)
        self.generation += 1
        self.last_ok = time.monotonic()
        self._unanswered_since = None
        self.life_locked = False
        await self.keep_life_lock()
        return shards

    async def keep_life_lock(self) -> None:
        """Take the node's life lock unless this session holds it. A namesake session (an
        earlier process of this node id, not ended yet) may hold it: until it is taken,
        peers notice this node's death at their next membership check instead."""
        if self.life_locked:
            return
        params = {"ns": self.namespace, "key": life_key(self.node_id)}
        self.life_locked = bool((await self._run("take_life_lock", params))[0][0])
        if not self.life_locked:
            logger.info(
                "life lock held by another session of this node id; retrying",
                extra={"event": "life_lock_busy"},
            )

    async def _check_session_locks(self, conn: Conn) -> None:
        """Refuse a transaction-mode pooler: session locks must outlive their statement.

        The probe key is negative (never a shard) and this connection's own: nodes opening
        their sessions at the same moment must not take each other's probe for a pooler.
        """
        key = -conn.info.backend_pid
        probe = {"ns": self.namespace, "shards": [key]}
        await conn.execute(query("try_lock_shards"), probe)
        ns = {"ns": self.namespace}
        cur = await conn.execute(query("my_shard_locks"), ns)
        held = {row["shard"] for row in await cur.fetchall()}
        await conn.execute(query("unlock_shards"), probe)
        if key not in held:
            raise ConfigError(
                "advisory locks do not survive between statements on this connection "
                "(a transaction-mode pooler in front of Postgres?); connect Pulse directly "
                "or through a session-mode pooler"
            )

    async def close(self) -> None:
        conn, self._conn, self._cur = self._conn, None, None
        if conn is not None and not conn.closed:
            try:
                await asyncio.wait_for(conn.close(), 2.0)
            except (TimeoutError, psycopg.Error, OSError):
                logger.debug("lock session close did not finish cleanly")

    async def _run(
        self,
        name: str,
        params: dict[str, Any],
        rows: AsyncRowFactory[Any] = tuple_row,
        *,
        text: bytes | None = None,
    ) -> list[Any]:
        """Rows of the statement ``name`` (or ``text``, a variant of it), as tuples unless
        ``rows`` says otherwise (the statements run every second, and tuples need no column
        names)."""
        async with self._lock:
            conn, cur = self._conn, self._cur
            if conn is None or cur is None or conn.closed:
                raise SessionLost("lock session is not connected")
            cur.row_factory = rows
            if self._unanswered_since is None:
                self._unanswered_since = time.monotonic()
            try:
                statement = text or query(name)
                tally.count("lock", name)
                deadline_s = self.statement_timeout_s + MARGIN_S
                found = await fetch_within(cur, statement, params, deadline_s)
            except TimeoutError as exc:
                await self._lost()  # still unanswered: the wait goes on across reconnects
                raise SessionLost(f"{name}: no answer within {self.statement_timeout_s}s") from exc
            except (psycopg.OperationalError, psycopg.errors.ReadOnlySqlTransaction) as exc:
                # A read-only refusal means the server was demoted to a standby (a
                # failover's old primary): the locks held there guard nothing.
                self._unanswered_since = None
                await self._lost()
                raise SessionLost(f"{name}: {describe(exc)}") from exc
            except psycopg.Error as exc:
                self._unanswered_since = None
                if conn.closed or conn.broken:
                    await self._lost()
                    raise SessionLost(f"{name}: {describe(exc)}") from exc
                raise StoreError(f"{name}: {describe(exc)}") from exc
            self.last_ok = time.monotonic()
            self._unanswered_since = None
            return found

    async def _lost(self) -> None:
        conn, self._conn, self._cur = self._conn, None, None
        logger.warning("lock session lost", extra={"event": "session_lost"})
        if self._on_lost is not None:
            self._on_lost()  # drop every shard before anything else can use them
        if conn is not None:
            with contextlib.suppress(TimeoutError, psycopg.Error, OSError):
                await asyncio.wait_for(conn.close(), 1.0)

    # -- shard locks ------------------------------------------------------------------

    async def try_lock(self, shards: Sequence[int]) -> set[int]:
        if not shards:
            return set()
        rows = await self._run("try_lock_shards", {"ns": self.namespace, "shards": list(shards)})
        return {row[0] for row in rows}

    async def unlock(self, shards: Sequence[int]) -> set[int]:
        if not shards:
            return set()
        rows = await self._run("unlock_shards", {"ns": self.namespace, "shards": list(shards)})
        return {shard for shard, released in rows if released}

    async def db_now(self) -> datetime:
        rows = await self._run("db_now", {"now": None})
        now: datetime = rows[0][0]
        return now

    async def my_locks(self) -> set[int]:
        rows = await self._run("my_shard_locks", {"ns": self.namespace})
        return {row[0] for row in rows}

    async def notify_shards(self, shards: Collection[int]) -> None:
        """Wake the holders of ``shards``: flights were queued there by a node that may not
        hold them (docs/design/beat.md)."""
        if shards:
            params = {"channel": self.settings.wake_channel, "shards": sorted(set(shards))}
            await self._run("notify_shards", params)

    async def ping(self, now: datetime | None = None) -> datetime:
        rows = await self._run("ping", {"now": now})
        value: datetime = rows[0][0]
        return value

    # -- jobs -------------------------------------------------------------------------

    async def claim(
        self,
        shards: Collection[int],
        limit: int,
        lease_s: float,
        now: datetime | None = None,
        ahead_s: float = 0.0,
        *,
        fair: bool = False,
    ) -> ClaimResult:
        """Claim jobs due by ``now + ahead_s``, oldest first, or across tenants in turn when
        ``fair``; ``next_due`` is the first due after that, ``held`` whether a due job was
        passed over (a tenant at its limit, or a row another claim holds)."""
        pairs = await self.tenants.pairs(shards, now, ahead_s) if fair else NO_PAIRS
        rows = await self._run(
            "claim",
            claim_params(shards, limit, lease_s, self.node_id, self.zone, now, ahead_s, pairs),
            text=variant("claim", "fair", fair),
        )
        # Rows are (db_now, next_due, held, *the ClaimedJob fields in order).
        return ClaimResult(rows[0][0], rows[0][1], claimed_jobs(rows, 3), rows[0][2])

    async def renew(
        self, leases: Sequence[tuple[UUID, int]], lease_s: float, now: datetime | None = None
    ) -> dict[UUID, str | None]:
        """Extend the leases still held; each held id maps to who asked to cancel its
        slot (None: nobody)."""
        if not leases:
            return {}
        params = {**_leases(leases), "lease_s": lease_s, "now": now}
        return {row[0]: row[1] for row in await self._run("renew", params)}

    async def release(
        self, leases: Sequence[tuple[UUID, int]], reason: str, now: datetime | None = None
    ) -> set[UUID]:
        if not leases:
            return set()
        params = {**_leases(leases), "reason": reason, "now": now}
        return {row[0] for row in await self._run("release", params)}

    async def gate_verdicts(
        self, slots: Sequence[tuple[UUID, datetime]]
    ) -> dict[tuple[UUID, datetime], str]:
        """Of the claimed (job, slot) pairs of gated jobs, those whose gate says not to run
        them, with why (``'skip: ...'`` or ``'wait: ...'``; migration 021). By slot: a
        backfill claims several flights of one job."""
        params = {"ids": [i for i, _ in slots], "slots": [s for _, s in slots]}
        rows = await self._run("gate_verdicts", params)
        return {(row[0], row[1]): row[2] for row in rows if row[2] is not None}

    async def held_runs(self) -> tuple[list[tuple[UUID, int]], list[FlightLease]]:
        """The leases of every job (id, token) and flight (id, slot, token) running under
        this node id, whoever claimed them."""
        rows = await self._run("held_runs", {"node_id": self.node_id})
        jobs = [(job_id, token) for job_id, slot, token in rows if slot is None]
        flights = [(job_id, slot, token) for job_id, slot, token in rows if slot is not None]
        return jobs, flights

    async def recover(
        self,
        shards: Collection[int],
        live: Sequence[str],
        now: datetime | None = None,
        lease_s: float = DEFAULT_LEASE_S,
    ) -> list[dict[str, Any]]:
        """Reset the runs of dead owners (or expired leases) in ``shards``; returns them.

        A row with ``poison`` set lost the last attempt its retries allow: it is left
        running under this node for ``lease_s``, for the caller to complete as failed."""
        if not shards:
            return []
        params = {"own": False, "shards": int_array(shards), "live": list(live)}
        return await self._recover(params, now, lease_s)

    async def recover_own(
        self, now: datetime | None = None, lease_s: float = DEFAULT_LEASE_S
    ) -> list[dict[str, Any]]:
        """Take back the slots an earlier process of this node id left running.

        Only before this process claims anything: then every such run is an orphan."""
        params = {"own": True, "shards": int_array(()), "live": []}
        return await self._recover(params, now, lease_s)

    async def _recover(
        self, params: dict[str, Any], now: datetime | None, lease_s: float
    ) -> list[dict[str, Any]]:
        mine = {"node_id": self.node_id, "zone": self.zone, "lease_s": lease_s, "now": now}
        return await self._run("recover", {**params, **mine}, dict_row)
