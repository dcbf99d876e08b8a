"""Console sessions in Postgres, with the clock driven: a session lives while its token does,
until its absolute expiry and while it is seen within the idle timeout; revoking the token
deletes its sessions in the revoking statement; only hashes are stored."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cluster.store.jobstore.store import JobStore
from cluster.web.tokens import new_session_id, new_token, token_hash

T0 = datetime(2030, 1, 1, tzinfo=UTC)
IDLE_S = 3600.0
MAX_S = 4 * 3600.0


async def signed_in(store: JobStore, name: str, expires_at: datetime | None = None) -> bytes:
    await store.access.create_token(name, "read", token_hash(new_token()), expires_at=expires_at)
    session = token_hash(new_session_id())
    expires = await store.sessions.create(name, session, idle_s=IDLE_S, max_age_s=MAX_S, now=T0)
    assert expires == T0 + timedelta(seconds=MAX_S)
    return session


async def who(store: JobStore, session: bytes, at: timedelta) -> str | None:
    found = await store.sessions.authenticate(session, idle_s=IDLE_S, now=T0 + at)
    return found.name if found else None


async def test_a_session_ends_when_idle_too_long(store: JobStore) -> None:
    session = await signed_in(store, "idle")
    assert await who(store, session, timedelta(minutes=50)) == "idle"
    assert await who(store, session, timedelta(minutes=100)) == "idle", "seen at 50 min"
    assert await who(store, session, timedelta(minutes=161)) is None


async def test_a_session_ends_at_its_absolute_expiry_however_busy(store: JobStore) -> None:
    session = await signed_in(store, "busy")
    for minutes in range(30, 240, 30):
        assert await who(store, session, timedelta(minutes=minutes)) == "busy"
    assert await who(store, session, timedelta(hours=4)) is None


async def test_revoking_the_token_deletes_its_sessions(store: JobStore) -> None:
    session = await signed_in(store, "revoked")
    other = await signed_in(store, "kept")
    await store.access.revoke_token("revoked")
    assert await who(store, session, timedelta(0)) is None
    assert await who(store, other, timedelta(0)) == "kept"
    cur = await store.db.conn.execute("SELECT token_name FROM console_sessions")
    assert [r["token_name"] for r in await cur.fetchall()] == ["kept"]


async def test_an_expired_tokens_sessions_stop_and_it_makes_none(store: JobStore) -> None:
    session = await signed_in(store, "short", expires_at=T0 + timedelta(minutes=10))
    assert await who(store, session, timedelta(minutes=5)) == "short"
    assert await who(store, session, timedelta(minutes=11)) is None
    later = T0 + timedelta(minutes=11)
    assert await store.sessions.create("short", b"x" * 32, now=later) is None


async def test_sign_out_deletes_the_row_and_sign_in_sweeps_dead_ones(store: JobStore) -> None:
    session = await signed_in(store, "out")
    assert await store.sessions.delete(session)
    assert not await store.sessions.delete(session)
    assert await who(store, session, timedelta(0)) is None
    stale = await signed_in(store, "stale")
    fresh = token_hash(new_session_id())
    later = T0 + timedelta(hours=5)
    await store.sessions.create("out", fresh, idle_s=IDLE_S, max_age_s=MAX_S, now=later)
    cur = await store.db.conn.execute("SELECT id_hash FROM console_sessions")
    assert [bytes(r["id_hash"]) for r in await cur.fetchall()] == [fresh]
    assert stale != fresh
