"""Console sessions: the ``console_sessions`` rows that a signed-in browser's cookie names.

The cookie carries a random session id and the row only its SHA-256, so neither a copy of
the table nor a cookie is the API token. A session is usable while its token is live (not
revoked, not expired), before its absolute expiry and while it is seen at least once per
idle timeout; revoking the token deletes its rows by the foreign key's cascade, in the
revoking statement. Why sessions rather than the token in the cookie: docs/design/web.md.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg

from cluster.store.access.tokens import TokenInfo
from cluster.store.connect import Conn
from cluster.store.queries import query, store_error

__all__ = ["DEFAULT_SESSION_IDLE_S", "DEFAULT_SESSION_MAX_S", "ConsoleSessions"]

DEFAULT_SESSION_IDLE_S = 2 * 3600.0
DEFAULT_SESSION_MAX_S = 12 * 3600.0


class ConsoleSessions:
    """Console sessions, on the connection of a ``JobStore``."""

    def __init__(self, conn: Conn) -> None:
        self._conn = conn

    async def create(
        self,
        token_name: str,
        id_hash: bytes,
        *,
        idle_s: float = DEFAULT_SESSION_IDLE_S,
        max_age_s: float = DEFAULT_SESSION_MAX_S,
        now: datetime | None = None,
    ) -> datetime | None:
        """Store a session of ``token_name``; its absolute expiry, or None when the token
        is no longer live (revoked or expired since it was checked). Sweeps dead sessions."""
        params = {
            "hash": id_hash,
            "token_name": token_name,
            "idle_s": idle_s,
            "max_age_s": max_age_s,
            "now": now,
        }
        rows = await self._rows("console_session_insert", params)
        return rows[0]["expires_at"] if rows else None

    async def authenticate(
        self, id_hash: bytes, *, idle_s: float = DEFAULT_SESSION_IDLE_S, now: datetime | None = None
    ) -> TokenInfo | None:
        """The live token of the live session with this hash, else None."""
        params = {"hash": id_hash, "idle_s": idle_s, "now": now}
        rows = await self._rows("console_session_authenticate", params)
        return TokenInfo.from_row(rows[0]) if rows else None

    async def delete(self, id_hash: bytes) -> bool:
        """End a session (sign-out); whether there was one."""
        return bool(await self._rows("console_session_delete", {"hash": id_hash}))

    async def _rows(self, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        try:
            cur = await self._conn.execute(query(name), params)
            return await cur.fetchall()
        except psycopg.Error as exc:
            raise store_error(exc) from exc
