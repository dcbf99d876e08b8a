"""Telling a death from a blip or a freeze: the members the shard keeper builds its ring from.

Three signals per live Redis member: its lock session in Postgres (and how long that has
idled), its Redis subscription (open while its process lives; the kernel closes it when
the process dies) and its heartbeat's age (docs/design/recovery.md):

- **Killed**: the session and the subscription end together. Dead at once.
- **Frozen** (SIGSTOP, a stalled VM): both connections stay open, but the heartbeat goes
  stale and the session idles. Past ``FROZEN_S`` of both, its session is ended here, which
  frees its shard locks without waiting for ``idle_session_timeout``; it is dead. Whatever
  it writes when it wakes is refused: its claims ran on that session, its completions
  carry lease tokens that recovery has replaced.
- **Stalled** (its Postgres traffic silently dropped, its Redis fine): the heartbeat stays
  fresh, but the node reports that its lock session has had no answer for longer than
  ``FROZEN_S``, and the server shows that session idle as long: its statements never
  arrive. Its session is ended here as a frozen one's is, and while its report stands and
  it has no session it gets no grace: a stalled node cannot reconnect.
- **Blip** (a cut network, a terminated backend, a Postgres restart): the session is gone
  but the subscription stays and the heartbeat is fresh. It stays a member for
  ``DEAD_SESSION_GRACE_S``, time to reconnect, so no shard moves.
- When Redis cannot say, the grace alone decides.

The dead are evicted from the Redis registry: every peer's heartbeat hears the ``leave``
at once and rebuilds its ring in the same pass, not at the heartbeat TTL.

The sessions are read from Postgres only when something may have changed: the member list
did, the death watch saw a session end (``NodeState.suspect``), a member is in its grace,
a peer's heartbeat is older than ``SUSPECT_BEATS`` beats (a killed or frozen node stops
beating), a peer reports an unanswered session, Redis cannot say, or ``JUDGE_EVERY_S``
passed. A quiet cluster's keeper reads nothing on most beats (docs/design/beat.md).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from cluster.errors import MembershipError, StoreError
from cluster.settings import DEFAULT_FREEZE_LIMIT_S
from cluster.store.lock.session import LockSession, SessionLost
from node.state import NodeState

logger = logging.getLogger(__name__)

DEAD_SESSION_GRACE_S = 2.0
# Silent in Redis and idle in Postgres this long: frozen (``--freeze-limit``). A healthy
# node beats every second and uses its session at least every poll interval.
FROZEN_S = DEFAULT_FREEZE_LIMIT_S
# Heartbeat ages are trusted only as read this recently (a node cut from Redis itself
# would otherwise see every peer go stale).
FRESH_VIEW_S = 2.0
# A peer whose last beat is older than this many heartbeat intervals is judged on the next
# beat; the others only every JUDGE_EVERY_S (a session that ended while its node still
# beats fires the death watch first).
SUSPECT_BEATS = 1.5
JUDGE_EVERY_S = 10.0


class Liveness:
    def __init__(
        self,
        state: NodeState,
        session: LockSession,
        *,
        connected: Callable[[Sequence[str]], Awaitable[set[str]]] | None = None,
        evict: Callable[[str], Awaitable[None]] | None = None,
        frozen_s: float = FROZEN_S,
        beat_s: float = 1.0,
    ) -> None:
        self._frozen_s = frozen_s
        self._suspect_s = SUSPECT_BEATS * beat_s
        self._judged: tuple[tuple[str, ...], tuple[str, ...], float] | None = None
        self._state = state
        self._session = session
        self._connected = connected
        self._evict = evict
        self._missing_since: dict[str, float] = {}
        self._dead: set[str] = set()  # evicted; forgotten once out of the live list
        self.pending = False  # a member is in its grace: judge it again soon

    async def alive(self) -> tuple[str, ...]:
        """This node and the live Redis members that are neither dead, frozen nor stalled."""
        state = self._state
        me = state.node_id
        peers = [m for m in state.live if m != me]
        now = time.monotonic()
        if self._quiet(peers, now) and self._judged is not None:
            return self._judged[1]
        state.suspect = False
        sessions = await self._session.peers.member_sessions(peers) if peers else {}
        now = time.monotonic()
        quiet = [m for m in peers if self._frozen_s > 0 and sessions.get(m, 0.0) > self._frozen_s]
        for member in quiet:
            why = self._why_idle(member, now)
            if why is not None and await self._end_idle(member, why):
                del sessions[member]
        missing = [m for m in peers if m not in sessions]
        connected = await self._still_connected(missing)
        alive = [me]
        for member in peers:
            if member in sessions:
                self._missing_since.pop(member, None)
                self._dead.discard(member)
                alive.append(member)
            elif member not in connected or self._stale(member, now):
                await self._died(member)
            elif self._stalled(member, now):
                self._missing_since.pop(member, None)  # out until its session is back
            elif now - self._missing_since.setdefault(member, now) < DEAD_SESSION_GRACE_S:
                alive.append(member)
        for gone in set(self._missing_since) - set(peers):
            del self._missing_since[gone]
        self._dead &= set(peers)
        self.pending = any(m in alive for m in self._missing_since)
        judged = tuple(sorted(alive))
        self._judged = (tuple(peers), judged, now)
        return judged

    def _quiet(self, peers: list[str], now: float) -> bool:
        """Nothing suggests a member changed since the last judgement (see the module
        docstring), so it stands without reading Postgres."""
        state, judged = self._state, self._judged
        if judged is None or judged[0] != tuple(peers) or now - judged[2] >= JUDGE_EVERY_S:
            return False
        if state.suspect or self.pending or self._dead or now - state.beats_read > FRESH_VIEW_S:
            return False
        if any(m in state.unanswered for m in peers):
            return False
        read = state.beats_read  # ages as of the last read: the heartbeat may run after us
        return all(m in state.beats and read - state.beats[m] <= self._suspect_s for m in peers)

    def _stale(self, member: str, now: float) -> bool:
        """``member``'s heartbeat is older than the freeze limit, by a view of Redis read
        just now."""
        state = self._state
        if self._frozen_s <= 0 or now - state.beats_read > FRESH_VIEW_S:
            return False
        if member not in state.beats:
            return False
        return now - state.beats[member] > self._frozen_s

    def _stalled(self, member: str, now: float) -> bool:
        """``member`` reports, in a view of Redis read just now, that its lock session has
        gone without an answer for longer than the freeze limit (a release that reports
        nothing answers)."""
        state = self._state
        if self._frozen_s <= 0 or now - state.beats_read > FRESH_VIEW_S:
            return False
        return state.unanswered.get(member, 0.0) > self._frozen_s

    def _why_idle(self, member: str, now: float) -> str | None:
        """Why the idle session of ``member`` is to be ended: it is frozen or stalled."""
        if self._stale(member, now):
            return "no heartbeat and no statement"
        if self._stalled(member, now):
            return "its statements unanswered and its session idle"
        return None

    async def _end_idle(self, member: str, why: str) -> bool:
        """End the lock session of a frozen or stalled member; True if it has none now
        (ended here, or gone meanwhile), False if it was used meanwhile, or if this node's
        login may not end it (then its session timeout does, as before)."""
        try:
            ending = await self._session.peers.end_frozen_session(member, self._frozen_s)
            if ending != "ended":
                return ending == "gone"
        except SessionLost:
            raise
        except StoreError as exc:
            logger.warning(
                "cannot end the lock session of frozen member %s: %s",
                member,
                exc,
                extra={"event": "frozen_session_kept"},
            )
            return False
        logger.warning(
            "ended the lock session of %s: %s for %.1fs",
            member,
            why,
            self._frozen_s,
            extra={"event": "frozen_session_ended", "member": member},
        )
        return True

    async def _still_connected(self, members: list[str]) -> set[str]:
        """Which of ``members`` still have their Redis subscription; all of them when
        Redis cannot say, so that only the grace decides."""
        if not members or self._connected is None:
            return set(members)
        try:
            return await self._connected(members)
        except MembershipError:
            return set(members)

    async def _died(self, member: str) -> None:
        if member in self._dead:
            return  # evicted already; the next heartbeat drops it from the live list
        self._dead.add(member)
        self._missing_since.pop(member, None)
        logger.warning(
            "member %s died (no lock session, and no Redis connection or heartbeat)",
            member,
            extra={"event": "member_died", "member": member},
        )
        if self._evict is not None:
            try:
                await self._evict(member)
            except MembershipError as exc:
                logger.info("could not evict %s: %s", member, exc)
