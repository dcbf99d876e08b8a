"""The wake-up rules of the services an idle node used to run every beat
(docs/design/beat.md): recovery reads Postgres when a member left the alive set, the zone
spaces changed or its idle interval passed; the shard keeper reads the members' sessions
only when something suggests a change; the claim loop's idle interval keeps the lock
session busier than the freeze limit; a NOTIFY of a held shard asks for a flight claim."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any, cast

import pytest

from cluster.settings import ClusterSettings
from cluster.store.lock.session import LockSession
from node.maintenance.recovery import IDLE_PASS_S, Recovery
from node.membership.liveness import JUDGE_EVERY_S, Liveness
from node.pipeline.claimer import idle_poll_s
from node.pipeline.listener import WakeListener
from node.service import Signal
from node.state import NodeState
from node.stats import Stats


class Session:
    """Stands in for the lock session: counts what recovery and the keeper ask."""

    connected = True

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.flights = SimpleNamespace(recover=self._recover_flights)
        self.peers = self  # its peer statements (LockSession.peers)

    async def recover(self, shards: Any, alive: Any, **_: Any) -> list[Any]:
        self.asked.append("recover")
        return []

    async def _recover_flights(self, shards: Any, alive: Any, **_: Any) -> list[Any]:
        self.asked.append("recover_flights")
        return []

    async def member_sessions(self, ids: list[str]) -> dict[str, float]:
        self.asked.append("member_sessions")
        return dict.fromkeys(ids, 0.0)


def recovery() -> tuple[Recovery, Session, NodeState]:
    state = NodeState("a", "z", 16, held=frozenset({1, 2}), alive=("a", "b", "c"))
    session = Session()
    return Recovery(state, cast(LockSession, session), Stats()), session, state


async def test_recovery_passes_when_a_member_leaves_and_once_per_idle_interval() -> None:
    made, session, state = recovery()
    await made.poll(clock=100.0)
    await made.poll(clock=101.0)
    assert session.asked == ["recover", "recover_flights"]
    state.alive = ("a", "b", "c", "d")  # a member joining needs no recovery
    await made.poll(clock=102.0)
    assert len(session.asked) == 2
    state.alive = ("a", "c", "d")  # b died
    await made.poll(clock=103.0)
    assert len(session.asked) == 4
    await made.poll(clock=103.0 + IDLE_PASS_S - 0.01)
    assert len(session.asked) == 4
    await made.poll(clock=103.0 + IDLE_PASS_S)
    assert len(session.asked) == 6


async def test_recovery_passes_when_the_zone_spaces_change() -> None:
    made, session, state = recovery()
    await made.poll(clock=100.0)
    state.spaces = {1: ("a",)}
    await made.poll(clock=101.0)
    assert len(session.asked) == 4


def liveness() -> tuple[Liveness, Session, NodeState]:
    state = NodeState("a", "z", 16, live=("a", "b", "c"), members_known=True)
    session = Session()
    return Liveness(state, cast(LockSession, session), beat_s=1.0), session, state


def beats(state: NodeState, ages: dict[str, float]) -> None:
    """A heartbeat that read ``ages`` just now."""
    state.beats_read = now = time.monotonic()
    state.beats = {member: now - age for member, age in ages.items()}


async def test_the_keeper_reads_the_sessions_only_when_something_may_have_changed() -> None:
    made, session, state = liveness()
    beats(state, {"a": 0.0, "b": 0.4, "c": 0.9})
    assert await made.alive() == ("a", "b", "c")
    assert await made.alive() == ("a", "b", "c")
    assert session.asked == ["member_sessions"]  # quiet: the judgement stands
    beats(state, {"a": 0.0, "b": 0.4, "c": 1.6})  # c missed a beat: killed or frozen?
    await made.alive()
    assert session.asked.count("member_sessions") == 2
    beats(state, {"a": 0.0, "b": 0.4, "c": 0.2})
    state.suspect = True  # the death watch saw a session end
    await made.alive()
    assert session.asked.count("member_sessions") == 3 and not state.suspect
    state.live = ("a", "b", "c", "d")
    beats(state, {"a": 0.0, "b": 0.4, "c": 0.2, "d": 0.1})
    await made.alive()
    assert session.asked.count("member_sessions") == 4
    await made.alive()
    assert session.asked.count("member_sessions") == 4


async def test_the_keeper_reads_the_sessions_when_redis_cannot_say(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made, session, state = liveness()
    beats(state, {"a": 0.0, "b": 0.4, "c": 0.9})
    await made.alive()
    state.beats_read -= 5.0  # the heartbeat has not read Redis for a while
    await made.alive()
    assert session.asked.count("member_sessions") == 2
    beats(state, {"a": 0.0, "b": 0.4, "c": 0.9})
    await made.alive()
    assert session.asked.count("member_sessions") == 2
    later = time.monotonic() + JUDGE_EVERY_S
    monkeypatch.setattr(time, "monotonic", lambda: later)
    state.beats_read = later
    state.beats = {m: later for m in ("a", "b", "c")}
    await made.alive()  # the judgement is JUDGE_EVERY_S old
    assert session.asked.count("member_sessions") == 3


def test_the_idle_claim_interval_keeps_the_session_busier_than_the_freeze_limit() -> None:
    assert idle_poll_s(1.0, 3.0, 10.0) == 2.0
    assert idle_poll_s(0.2, 3.0, 10.0) == pytest.approx(0.4)
    assert idle_poll_s(1.0, 2.0, 10.0) == pytest.approx(1.2)  # 1.25 x 1.2 + 0.5 = 2
    assert idle_poll_s(1.0, 0.0, 4.0) == 1.0  # no freeze limit: the session timeout's quarter
    assert idle_poll_s(3.0, 3.0, 10.0) == 3.0  # never below the poll interval


def test_a_notify_of_a_held_shard_asks_for_a_flight_claim() -> None:
    state = NodeState("n1", "a", 16, held=frozenset({5}))
    listener = WakeListener(ClusterSettings(), state, Signal())
    listener.on_notify("6")
    assert not state.flights_written
    listener.on_notify("5")
    assert state.flights_written and state.wake.is_set()
