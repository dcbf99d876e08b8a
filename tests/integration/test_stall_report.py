"""What a lock session reports as unanswered (docs/design/lock-session.md), through the
chaos proxy: a stalled network leaves its statement and the reconnects after it without
an answer, so the wait grows across them, and the server shows the session idle; an answer
ends it, and so does an error (a cut network, a restart), which is not a stall."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from cluster.chaos.fleet import via_proxy
from cluster.chaos.servers.proxy import Proxy
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from cluster.store.lock.session import LockSession, SessionLost
from tests.helpers.sessions import Opener
from tests.helpers.waiting import until

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def stalling(
    settings: ClusterSettings, proxy: Proxy, store: JobStore
) -> AsyncIterator[LockSession]:
    session = LockSession(
        replace(settings, database_url=via_proxy(settings.database_url, proxy.port)),
        "stalling",
        "z",
        session_timeout_s=30,
        statement_timeout_s=0.5,  # gives up on an answer after 1.5 s
    )
    await session.open(16)
    try:
        yield session
    finally:
        await session.close()


async def test_a_stall_is_reported_across_the_timeout_and_ends_with_an_answer(
    proxy: Proxy, stalling: LockSession, open_session: Opener
) -> None:
    peer = await open_session("peer")
    await stalling.ping()
    assert stalling.unanswered_s() == 0.0
    proxy.stall()
    with pytest.raises(SessionLost):
        await stalling.ping()
    waited = stalling.unanswered_s()
    assert waited >= 1.5
    reopening = asyncio.create_task(stalling.open(16))  # hangs: the network says nothing
    await until(lambda: stalling.unanswered_s() > waited + 0.5, "the wait to go on", 10)
    idle = (await peer.peers.member_sessions(["stalling"])).get("stalling", 0.0)
    assert idle >= waited, "the stalled statement never reached the server"
    proxy.restore()
    await asyncio.wait_for(reopening, 30)
    assert stalling.unanswered_s() == 0.0
    await stalling.ping()


async def test_an_error_is_an_answer(proxy: Proxy, stalling: LockSession) -> None:
    proxy.cut()
    with pytest.raises(SessionLost):
        await stalling.ping()
    assert stalling.unanswered_s() == 0.0
    with pytest.raises(Exception):  # noqa: B017 - refused: whatever the driver calls it
        await stalling.open(16)
    assert stalling.unanswered_s() == 0.0
