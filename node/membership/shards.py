"""The shard keeper: turns the ring's desired shards into advisory locks this node holds.

Members are the live Redis members that ``Liveness`` does not judge dead, frozen or
stalled: a killed node's shards move as soon as it is seen, a blip of a lock session moves none
(node/membership/liveness.py). Lost shards are unlocked, gained ones locked (a shard still
locked by its previous owner is retried until free), and every gained shard is recovered
before it is claimed, all in the same pass.
A new session of a running node first takes back what the lost one may have claimed
without the node hearing of it (``Recovery.take_back_untracked``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from cluster.errors import StoreError
from cluster.store.lock.session import LockSession, SessionLost
from node.membership.eachzone import ZoneChildren
from node.membership.liveness import FROZEN_S, Liveness
from node.state import NodeState
from node.stats import Stats
from ring import Ring, diff
from ring.zones import zone_owned

logger = logging.getLogger(__name__)

RETRY_MISSING_S = 0.25
SPACES_REFRESH_S = 5.0
# While no each-zone job exists: a write that adds one, or a new zone set, NOTIFYs
# (``NodeState.spaces_stale``), so this only bounds a lost notification.
SPACES_IDLE_REFRESH_S = 30.0


class ShardKeeper:
    def __init__(
        self,
        state: NodeState,
        session: LockSession,
        stats: Stats,
        recover: Callable[[frozenset[int]], Awaitable[int]],
        *,
        expected_shards: int | None,
        take_back: Callable[[], Awaitable[int]] | None = None,
        connected: Callable[[Sequence[str]], Awaitable[set[str]]] | None = None,
        evict: Callable[[str], Awaitable[None]] | None = None,
        frozen_s: float = FROZEN_S,
        beat_s: float = 1.0,
    ) -> None:
        self._take_back = take_back
        self._take_back_due = False  # a session was lost: its answers may have been too
        self._state = state
        self._session = session
        self._stats = stats
        self._recover = recover
        self._expected = expected_shards
        self._ring = Ring([state.node_id])
        self._liveness = Liveness(
            state, session, connected=connected, evict=evict, frozen_s=frozen_s, beat_s=beat_s
        )
        self._spaces_read = 0.0  # monotonic time the zone spaces were last read
        self._children = ZoneChildren(state, session)

    async def reconnect(self) -> None:
        state = self._state
        self._stats.locks_lost += state.session_untrusted()
        state.reconnect = False
        self._take_back_due = self._take_back is not None
        state.suspect = True  # judge every member afresh on the new session
        state.shard_count = await self._session.open(self._expected or state.shard_count)
        logger.info("lock session connected", extra={"event": "session_connected"})

    async def _take_back_untracked(self, take_back: Callable[[], Awaitable[int]]) -> None:
        """Once per new session; again after a reconnect if the session broke meanwhile.
        Any other failure leaves those runs to their leases rather than keep the node
        from its shards."""
        try:
            await take_back()
        except SessionLost:
            raise
        except StoreError as exc:
            logger.warning(
                "runs a lost answer may have left under this node wait for their leases: %s",
                exc,
                extra={"event": "take_back_failed"},
            )
        self._take_back_due = False

    async def members_alive(self) -> tuple[str, ...]:
        """This node and the live members that are neither dead, frozen nor stalled."""
        return await self._liveness.alive()

    async def run_once(self) -> float | None:
        state = self._state
        if state.reconnect or not self._session.connected:
            await self.reconnect()
        if self._take_back_due and self._take_back is not None:
            await self._take_back_untracked(self._take_back)
        await self._session.keep_life_lock()
        if not state.members_known or not state.claiming:
            return RETRY_MISSING_S
        alive = await self.members_alive()
        if alive != state.alive:
            state.alive = alive
            self._ring = Ring(alive)
        desired = self._ring.owned(state.node_id, state.shard_count) | await self._zone_shards()
        state.desired = desired
        change = diff(state.held, desired)
        if change.release:
            # Out of `held` before the unlock is queued on the session: the claim loop
            # snapshots `held`, and a claim queued behind the unlock must not carry them.
            state.held = state.held - change.release
            await self._unlock(change.release)
            self._stats.locks_released += len(change.release)
            logger.info(
                "released %d shards (now %d)",
                len(change.release),
                len(state.held),
                extra={"event": "shards_released"},
            )
        if change.acquire:
            got = frozenset(await self._session.try_lock(sorted(change.acquire)))
            if got:
                try:
                    await self._recover(got)
                except Exception:
                    # Not recovered, so not claimable; and a lock `held` does not count
                    # would never be unlocked when the ring moves the shard away.
                    await self._unlock(got)
                    raise
                state.held = state.held | got
                self._stats.locks_acquired += len(got)
                state.wake.set()
                logger.info(
                    "acquired %d shards (now %d of %d desired)",
                    len(got),
                    len(state.held),
                    len(desired),
                    extra={"event": "shards_acquired"},
                )
        if desired - state.held or self._liveness.pending:
            return RETRY_MISSING_S
        return None

    async def _zone_shards(self) -> frozenset[int]:
        """The shards of the zone spaces this node's zone belongs to (docs/design/zones.md).

        The spaces are re-read every few seconds while each-zone jobs exist, else every
        ``SPACES_IDLE_REFRESH_S``, and when a NOTIFY names an unknown one."""
        state = self._state
        now = time.monotonic()
        every_s = SPACES_REFRESH_S if self._children.found else SPACES_IDLE_REFRESH_S
        if state.spaces_stale or now - self._spaces_read >= every_s:
            state.spaces_stale = False
            self._spaces_read = now
            try:
                await self._children.run_once()  # may add the space of this node's zone
            except SessionLost:
                raise
            except Exception:
                # The shards come first: a bad each-zone job must not stop the keeper.
                logger.exception("each-zone children not kept", extra={"event": "zone_children"})
                self._children.found = True  # try again on the next short refresh
            state.spaces = await self._session.zones.zone_spaces()
        zones = {m: z for m, z in state.member_zones.items() if m in state.alive}
        return zone_owned(state.node_id, state.zone, zones, state.spaces)

    async def _unlock(self, shards: frozenset[int]) -> None:
        """Unlock ``shards``; if that fails, reconnect so the session drops every lock."""
        try:
            await self._session.unlock(sorted(shards))
        except SessionLost:
            raise
        except StoreError:
            # Advisory unlocks are not transactional: some may have happened. Only a new
            # session gives a known state again.
            self._stats.locks_lost += self._state.session_untrusted()
            raise

    async def release_all(self) -> None:
        """Unlock every shard (graceful shutdown); the node stops claiming first."""
        held, self._state.held = self._state.held, frozenset()
        if held and self._session.connected:
            await self._session.unlock(sorted(held))
            logger.info("released all %d shards", len(held), extra={"event": "shards_released"})
