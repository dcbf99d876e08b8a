"""Who may use the HTTP API, and what they did: the ``api_tokens`` and ``api_audit`` tables.

Only a token's SHA-256 is stored (``cluster.web.tokens`` makes and hashes the secret), so a
copy of the database hands out no token. The audit row of an API change is written on the
connection of the change, inside its transaction (``JobStore.transaction``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from cluster.errors import Conflict, NotFound
from cluster.jobs.fields import check_text
from cluster.jobs.models import iso
from cluster.store.connect import Conn
from cluster.store.queries import query, store_error


@dataclass(frozen=True)
class TokenInfo:
    name: str
    role: str
    tenant: str | None
    created_at: datetime | None = None
    expires_at: datetime | None = None
    last_used_at: datetime | None = None
    revoked_at: datetime | None = None  # a revoked token keeps its row, and its name

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> TokenInfo:
        return cls(
            name=row["name"],
            role=row["role"],
            tenant=row["tenant_id"],
            created_at=row.get("created_at"),
            expires_at=row.get("expires_at"),
            last_used_at=row.get("last_used_at"),
            revoked_at=row.get("revoked_at"),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "role": self.role,
            "tenant": self.tenant,
            "created_at": iso(self.created_at),
            "expires_at": iso(self.expires_at),
            "last_used_at": iso(self.last_used_at),
            "revoked_at": iso(self.revoked_at),
        }


@dataclass(frozen=True)
class AuditEntry:
    id: int
    at: datetime
    token: str
    action: str
    tenant: str | None
    job: str | None
    source: str | None
    detail: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "at": iso(self.at),
            "token": self.token,
            "action": self.action,
            "tenant": self.tenant,
            "job": self.job,
            "source": self.source,
            "detail": self.detail,
        }


class Access:
    """Tokens and the audit trail, on the connection of a ``JobStore``."""

    def __init__(self, conn: Conn) -> None:
        self._conn = conn

    async def create_token(
        self,
        name: str,
        role: str,
        token_hash: bytes,
        *,
        tenant: str | None = None,
        expires_s: float | None = None,
        expires_at: datetime | None = None,
        now: datetime | None = None,
    ) -> TokenInfo:
        """Store a token's hash, live for ``expires_s`` or until ``expires_at`` (neither:
        for ever); ``Conflict`` if the name is taken."""
        check_text(name, "name")
        params = {
            "name": name,
            "role": role,
            "tenant_id": tenant,
            "hash": token_hash,
            "expires_s": expires_s,
            "expires_at": expires_at,
            "now": now,
        }
        rows = await self._rows("token_insert", params)
        if not rows:
            raise Conflict(
                "name", f"a token named {name!r} exists or was revoked; names are not reused"
            )
        return TokenInfo.from_row(rows[0])

    async def reissue_token(self, name: str, role: str, token_hash: bytes) -> TokenInfo:
        """Give the token ``name`` a new secret, live again with no expiry (``pulse up``'s
        own token at each start); made if missing."""
        params = {"name": check_text(name, "name"), "role": role, "hash": token_hash}
        return TokenInfo.from_row((await self._rows("token_reissue", params))[0])

    async def tokens(self) -> list[TokenInfo]:
        return [TokenInfo.from_row(r) for r in await self._rows("token_list", {})]

    async def revoke_token(self, name: str) -> None:
        """Revoke the live token ``name``: its row stays, so the name is never reused."""
        if not await self._rows("token_revoke", {"name": check_text(name, "name")}):
            raise NotFound(f"no live token named {name!r}")

    async def authenticate(self, token_hash: bytes) -> TokenInfo | None:
        """The live (not expired, not revoked) token with this hash, else None."""
        rows = await self._rows("token_authenticate", {"hash": token_hash})
        return TokenInfo.from_row(rows[0]) if rows else None

    async def audit(
        self,
        token: str,
        action: str,
        *,
        tenant: str | None,
        job: str | None,
        source: str | None,
        detail: str | None = None,
    ) -> None:
        params = {
            "token_name": token,
            "action": action,
            "tenant_id": tenant,
            "job_name": job,
            "source": source,
            "detail": detail,
        }
        await self._rows("audit_insert", params, fetch=False)

    async def audit_entries(
        self, *, scope: str | None = None, before: int | None = None, limit: int = 100
    ) -> list[AuditEntry]:
        """Newest first; ``before``: an id, the cursor of the next page."""
        rows = await self._rows("audit_list", {"scope": scope, "before": before, "limit": limit})
        return [
            AuditEntry(
                r["id"],
                r["at"],
                r["token_name"],
                r["action"],
                r["tenant_id"],
                r["job_name"],
                r["source"],
                r["detail"],
            )
            for r in rows
        ]

    async def _rows(
        self, name: str, params: dict[str, Any], *, fetch: bool = True
    ) -> list[dict[str, Any]]:
        try:
            cur = await self._conn.execute(query(name), params)
            return await cur.fetchall() if fetch else []
        except psycopg.Error as exc:
            raise store_error(exc) from exc
