"""The NOTIFY listener: wakes the claim loop when an admin write touches a held shard.

It only wakes the claim loop early: while it is down, jobs still fire on the claim loop's
own schedule, so its failures are retried with backoff and never stop the node.
"""

from __future__ import annotations

import asyncio

from cluster.settings import ClusterSettings
from cluster.store import notify
from node.state import NodeState


class WakeListener:
    def __init__(self, cluster: ClusterSettings, state: NodeState, stop: asyncio.Event) -> None:
        self._cluster = cluster
        self._state = state
        self._stop = stop

    def on_notify(self, payload: str) -> None:
        """The payload names the shard whose job changed."""
        try:
            shard = int(payload)
        except ValueError:
            return
        if shard in self._state.held:
            self._state.wake.set()

    async def run_once(self) -> None:
        """Listen until the stop event is set; ``StoreError`` when the connection breaks."""
        await notify.listen(self._cluster, self._state.node_id, self.on_notify, self._stop)
