"""The stall rule (docs/design/lock-session.md): a peer ends the idle lock session of a
member whose heartbeat is fresh but which reports its session unanswered for longer than
the freeze limit, and that member gets no grace while its report stands and it has no
session. A busy session, a short or absent report (an older release), a report read long
ago and a freeze limit of 0 end nothing. The clock is set by each test."""

from __future__ import annotations

import time
from typing import cast

import pytest

from cluster.members import Beat, LiveMember, MemberInfo, MemberRegistry
from cluster.store.lock.peers import Ending
from cluster.store.lock.session import LockSession
from node.membership.heartbeat import REPORT_UNANSWERED_S, Heartbeat
from node.membership.liveness import DEAD_SESSION_GRACE_S, FROZEN_S, Liveness
from node.state import NodeState
from node.stats import Stats

NOW = 1000.0


class Session:
    """Stands in for the lock session: each member's idle time as pg_stat_activity would
    show it, and the sessions ended (a session is ended only while idle that long)."""

    def __init__(self, idle: dict[str, float]) -> None:
        self.idle = idle
        self.ended: list[str] = []
        self.peers = self  # its peer statements (LockSession.peers)

    async def member_sessions(self, ids: list[str]) -> dict[str, float]:
        return {m: self.idle[m] for m in ids if m in self.idle}

    async def end_frozen_session(self, node_id: str, idle_s: float) -> Ending:
        if node_id not in self.idle:
            return "gone"
        if self.idle[node_id] <= idle_s:
            return "used"
        del self.idle[node_id]
        self.ended.append(node_id)
        return "ended"


async def _connected(members: object) -> set[str]:
    return {"b", "c"}  # every peer's process still holds its Redis subscription


def _judge(
    monkeypatch: pytest.MonkeyPatch,
    idle: dict[str, float],
    unanswered: dict[str, float],
    *,
    read_ago_s: float = 0.0,
    frozen_s: float = FROZEN_S,
) -> tuple[Liveness, Session, NodeState]:
    """A keeper of node ``a`` at ``NOW`` whose heartbeat read fresh beats of ``b`` and
    ``c``, and their reports of unanswered sessions, ``read_ago_s`` ago."""
    monkeypatch.setattr(time, "monotonic", lambda: NOW)
    state = NodeState("a", "z", 16, live=("a", "b", "c"), members_known=True)
    read = NOW - read_ago_s
    state.beats = {"a": read, "b": read - 0.2, "c": read - 0.4}
    state.beats_read = read
    state.unanswered = unanswered
    session = Session(idle)
    made = Liveness(state, cast(LockSession, session), connected=_connected, frozen_s=frozen_s)
    return made, session, state


async def test_a_stalled_member_loses_its_idle_session_and_gets_no_grace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made, session, _ = _judge(monkeypatch, {"b": 3.5, "c": 0.1}, {"b": 3.2})
    assert await made.alive() == ("a", "c")
    assert session.ended == ["b"]
    # Still without a session, within the grace a blip would get: out until it is back.
    monkeypatch.setattr(time, "monotonic", lambda: NOW + DEAD_SESSION_GRACE_S / 2)
    assert await made.alive() == ("a", "c")
    assert not made.pending


async def test_a_stalled_member_is_back_with_its_session(monkeypatch: pytest.MonkeyPatch) -> None:
    made, session, state = _judge(monkeypatch, {"b": 3.5, "c": 0.1}, {"b": 3.2})
    assert await made.alive() == ("a", "c")
    session.idle["b"] = 0.0  # the network healed: it reconnected before its next report
    assert await made.alive() == ("a", "b", "c")
    state.unanswered = {}
    assert await made.alive() == ("a", "b", "c")


async def test_a_stalled_member_whose_session_ended_meanwhile_is_out_as_well(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its session shows in the keeper's read but is gone when the keeper ends it (a
    backend another peer terminated, still listed a moment after): out, not kept on the
    strength of the read."""
    made, session, _ = _judge(monkeypatch, {"b": 3.5, "c": 0.1}, {"b": 3.2})
    shown = dict(session.idle)

    async def listed_still(ids: list[str]) -> dict[str, float]:
        return {m: shown[m] for m in ids if m in shown}

    del session.idle["b"]
    monkeypatch.setattr(session, "member_sessions", listed_still)
    assert await made.alive() == ("a", "c")
    assert session.ended == []


@pytest.mark.parametrize(
    ("idle_s", "reported_s", "read_ago_s", "frozen_s", "why"),
    [
        (0.0, 6.0, 0.0, FROZEN_S, "its statement runs: a slow Postgres, not a stall"),
        (2.5, 6.0, 0.0, FROZEN_S, "its session was used within the freeze limit"),
        (3.5, 2.5, 0.0, FROZEN_S, "its session has not gone unanswered that long"),
        (3.5, None, 0.0, FROZEN_S, "it reports nothing: it answers, or it is an older release"),
        (3.5, 9.0, 5.0, FROZEN_S, "a report read long ago: this node may be cut from Redis"),
        (30.0, 30.0, 0.0, 0.0, "a freeze limit of 0 leaves it to the session timeout"),
    ],
)
async def test_no_session_is_ended_without_both_signals_read_just_now(
    monkeypatch: pytest.MonkeyPatch,
    idle_s: float,
    reported_s: float | None,
    read_ago_s: float,
    frozen_s: float,
    why: str,
) -> None:
    reports = {} if reported_s is None else {"b": reported_s}
    made, session, _ = _judge(
        monkeypatch,
        {"b": idle_s, "c": 0.1},
        reports,
        read_ago_s=read_ago_s,
        frozen_s=frozen_s,
    )
    assert await made.alive() == ("a", "b", "c"), why
    assert session.ended == [], why


async def test_a_member_without_session_and_without_report_keeps_the_grace_of_a_blip(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made, _, _ = _judge(monkeypatch, {"c": 0.1}, {"b": 1.5})
    assert await made.alive() == ("a", "b", "c")
    assert made.pending


async def test_a_report_makes_the_keeper_judge_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    made, session, state = _judge(monkeypatch, {"b": 0.1, "c": 0.1}, {})
    assert await made.alive() == ("a", "b", "c")
    session.idle["b"] = 3.5  # quiet cluster: the judgement would stand for JUDGE_EVERY_S
    state.unanswered = {"b": 3.2}
    assert await made.alive() == ("a", "c")


class Registry:
    """Stands in for the member registry: records each report, answers with ``peers``'."""

    def __init__(self, peers: dict[str, float]) -> None:
        self.peers = peers
        self.sent: list[float] = []

    async def beat(self, info: MemberInfo, ttl_s: float, *, unanswered_s: float = 0.0) -> Beat:
        self.sent.append(unanswered_s)
        return Beat({"a": 0.0, "b": 0.3}, {"a": unanswered_s, **self.peers})

    async def live(self, ttl_s: float) -> list[LiveMember]:
        return []


async def test_the_heartbeat_reports_only_a_wait_longer_than_a_statement() -> None:
    waits = iter([0.2, REPORT_UNANSWERED_S + 0.5])
    registry = Registry({})
    state = NodeState("a", "z", 16)
    info = MemberInfo("a", "z", "host", 1, "", "dev", 8)
    beat = Heartbeat(
        cast(MemberRegistry, registry),
        info,
        state,
        Stats(),
        ttl_s=5,
        unanswered=lambda: next(waits),
    )
    await beat.run_once()
    await beat.run_once()
    assert registry.sent == [0.0, REPORT_UNANSWERED_S + 0.5]
    assert REPORT_UNANSWERED_S < FROZEN_S
    assert state.unanswered == {}  # its own report is not a peer's


async def test_a_peers_report_wakes_the_keeper() -> None:
    state = NodeState("a", "z", 16)
    info = MemberInfo("a", "z", "host", 1, "", "dev", 8)
    beat = Heartbeat(cast(MemberRegistry, Registry({"b": 3.2})), info, state, Stats(), ttl_s=5)
    await beat.run_once()
    state.rebalance.clear()
    await beat.run_once()
    assert state.unanswered == {"b": 3.2} and state.rebalance.is_set()
