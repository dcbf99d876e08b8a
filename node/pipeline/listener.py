"""The NOTIFY listener: wakes the claim loop (and the backfiller) when an admin write
touches a held shard or a tenant at its limit gets a place back, wakes alert delivery when
a delivery was queued, and passes on requests to cancel a run
(``cancel:<job id>:<lease token>:<who>``).

It only makes things happen early: while it is down, jobs still fire on the claim loop's
own schedule and lease renewal carries cancel requests, so its failures are retried with
backoff and never stop the node.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime
from uuid import UUID

from cluster.settings import ClusterSettings
from cluster.store import notify
from node.state import NodeState
from ring.zones import PARKED_SHARD, space_of

CANCEL_PREFIX = notify.CANCEL_PREFIX
TENANT_PLACE_FREED = notify.TENANT_PLACE_FREED
LIMIT_PLACE_FREED = notify.LIMIT_PLACE_FREED
ALERT_QUEUED = notify.ALERT_QUEUED
MEMBER_RUNS = notify.MEMBER_RUNS


# Stop the run of (job id, lease token), asked by someone; with a slot, that flight of an
# overlap `allow` job (node.pipeline.executor.Executor.stop).
CancelRun = Callable[[UUID, int, str, datetime | None], bool]


class WakeListener:
    def __init__(
        self,
        cluster: ClusterSettings,
        state: NodeState,
        stop: asyncio.Event,
        cancel: CancelRun | None = None,
    ) -> None:
        self._cluster = cluster
        self._state = state
        self._stop = stop
        self._cancel = cancel

    def on_notify(self, payload: str) -> None:
        """The payload names the shard whose job changed, or a run to cancel."""
        if payload.startswith(CANCEL_PREFIX):
            self._on_cancel(payload)
            return
        if payload in (TENANT_PLACE_FREED, LIMIT_PLACE_FREED):
            # A tenant (migration 014) or a named limit at its cap got a place back.
            self._state.wake.set()
            return
        if payload == MEMBER_RUNS:
            self._state.member_runs.set()  # each-node runs queued (docs/design/each-node.md)
            self._state.wake.set()
            return
        if payload == ALERT_QUEUED:
            self._state.alerts.set()  # an alert delivery was queued (migration 028)
            return
        try:
            shard = int(payload)
        except ValueError:
            return
        if shard in self._state.held:
            self._state.wake.set()
            self._state.shard_written.set()  # a backfill request, say
            self._state.flights_written = True  # a trigger's or a rerun's flight, say
            self._state.tenants_written = True  # a new tenant's job, say
        elif shard == PARKED_SHARD or space_of(shard) not in (None, *self._state.spaces):
            self._state.spaces_stale = True  # an each-zone job, or a new zone set
            self._state.rebalance.set()

    def _on_cancel(self, payload: str) -> None:
        job, token, slot, by = [*payload[len(CANCEL_PREFIX) :].split(":", 3), "", "", ""][:4]
        try:
            job_id, lease_token = UUID(job), int(token)
            flight = notify.slot_of(slot) if slot else None
        except ValueError:
            return
        if self._cancel is not None:
            self._cancel(job_id, lease_token, by or "?", flight)

    async def run_once(self) -> None:
        """Listen until the stop event is set; ``StoreError`` when the connection breaks."""
        await notify.listen(self._cluster, self._state.node_id, self.on_notify, self._stop)
