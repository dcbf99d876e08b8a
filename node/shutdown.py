"""The drain protocol of a stopping node (SIGTERM, SIGINT, or a vital service crashed):
stop claiming, leave the member registry, unlock the shards, let runs in flight finish up
to the drain timeout, release the rest for another attempt elsewhere, flush completions.
Guarded by tests/e2e/test_nodes.py and tests/integration/test_launcher.py.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from cluster.errors import MembershipError, StoreError
from cluster.members import MemberRegistry
from cluster.store.lock.records import ClaimedJob
from cluster.store.lock.session import LockSession
from cluster.store.lock.writer import ResultWriter
from node.membership.shards import ShardKeeper
from node.pipeline.completer import Completer
from node.pipeline.executor import Executor
from node.service import Signal
from node.state import NodeState

logger = logging.getLogger(__name__)

HEARTBEAT_STOP_S = 3.0
LOCKERS_STOP_S = 5.0
FLUSH_TIMEOUT_S = 10.0
FOLLOWERS_STOP_S = 3.0


@dataclass(frozen=True)
class Services:
    """A node's running services, grouped by the step of the drain that ends them."""

    stop_claiming: Signal  # heartbeat, membership subscription, lockers, NOTIFY listener
    stop_writing: Signal  # lease renewal, completer
    heartbeat: asyncio.Task[None]
    lockers: list[asyncio.Task[None]]  # shard keeper, claim loop, recovery
    writers: list[asyncio.Task[None]]  # lease renewal, completer
    followers: list[asyncio.Task[None]]  # membership subscription, NOTIFY listener
    watch: asyncio.Task[None]  # the death watch: one wait of up to 10 s on a peer


@dataclass(frozen=True)
class Shutdown:
    node_id: str
    state: NodeState
    registry: MemberRegistry
    keeper: ShardKeeper
    session: LockSession
    executor: Executor
    completer: Completer
    writer: ResultWriter
    drain_timeout_s: float

    async def run(self, services: Services) -> None:
        # Every moment between the last claim and the unlock is a gap in this node's
        # shards: wait only for what must end first, the heartbeat (or it could register
        # the node again after it left) and the services that claim or lock.
        self.state.claiming = False
        services.stop_claiming.set()
        await finish([services.heartbeat], HEARTBEAT_STOP_S)
        await self._leave()
        await finish(services.lockers, LOCKERS_STOP_S)
        await self._unlock()  # others take the shards at once, not after the session ends
        await self._release(await self.executor.drain(self.drain_timeout_s))
        # Last, so the completions of runs that ended during the drain are written too.
        services.stop_writing.set()
        await finish(services.writers, FLUSH_TIMEOUT_S)
        await self._drain_member_runs()
        # The membership subscription and the NOTIFY listener hold nothing: not waited
        # for before the unlock. Nor does the death watch, whose wait on a peer does not
        # end with the stop: it is cancelled (its connection closed), not waited for.
        await finish([services.watch], 0.0)
        await finish(services.followers, FOLLOWERS_STOP_S)
        if self.completer.pending:
            logger.error(
                "%d completions could not be written before exit; their slots will be "
                "recovered and run again",
                self.completer.pending,
                extra={"event": "completions_lost"},
            )
        self.executor.shutdown()
        await self.writer.close()

    async def _leave(self) -> None:
        try:
            await self.registry.deregister(self.node_id)
        except MembershipError as exc:
            logger.warning("could not leave the member registry: %s", exc)

    async def _unlock(self) -> None:
        try:
            await self.keeper.release_all()
        except StoreError as exc:
            logger.warning("could not unlock shards (they free with the session): %s", exc)

    async def _drain_member_runs(self) -> None:
        """Each-node runs of this node not ended are its misses, 'drained', never run by
        another member (docs/design/each-node.md)."""
        try:
            drained = await self.session.flights.drain()
        except StoreError as exc:
            logger.warning("could not record each-node runs drained (recovery will): %s", exc)
            return
        if drained:
            logger.warning(
                "%d each-node runs recorded missed (drained)",
                len(drained),
                extra={"event": "member_runs_drained"},
            )

    async def _release(self, left: list[ClaimedJob]) -> None:
        if not left:
            return
        reason = "node shut down before the run ended"
        try:
            await self.session.release(
                [(j.id, j.lease_token) for j in left if not j.flight], reason
            )
            flights = [j for j in left if j.flight]
            await self.session.flights.release(
                [(j.id, j.slot, j.lease_token) for j in flights], reason
            )
            await self.session.notify_shards({j.shard for j in flights})
        except StoreError as exc:
            logger.warning("could not release unfinished runs (recovery will): %s", exc)
            return
        logger.warning(
            "released %d unfinished runs for another attempt",
            len(left),
            extra={"event": "runs_released"},
        )


async def finish(tasks: list[asyncio.Task[None]], timeout_s: float) -> None:
    """Let tasks end by themselves within ``timeout_s``, then cancel the rest (said in the
    log, unless ``timeout_s`` is 0: cancelled at once)."""
    if not tasks:
        return
    _, pending = await asyncio.wait(tasks, timeout=timeout_s)
    if pending and timeout_s > 0:
        logger.warning(
            "%d services did not stop within %.0f s of the stop: cancelled",
            len(pending),
            timeout_s,
            extra={"event": "services_cancelled"},
        )
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)
