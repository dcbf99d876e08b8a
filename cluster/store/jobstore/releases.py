"""The guard of a rolling upgrade for every-node jobs (docs/design/each-node.md#rolling-upgrades):
a node of a release that does not know them claims such a job as an ordinary one and runs
each slot on itself alone. Creating a job with ``each_node``, or converting one to it, is
refused while the lock session of such a node is open. Each lock session of a node that
knows them holds a shared advisory lock, the mark (``lifelock.EACH_NODE_MARK``), so the
question is one read of ``pg_locks``, asked only by writes that make an every-node job."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cluster.errors import InvalidInput
from cluster.jobs.spec import JobSpec
from cluster.store.connect import Row
from cluster.store.jobstore import bulk
from cluster.store.jobstore.scoped import ScopedConnection
from cluster.store.lock.lifelock import EACH_NODE_MARK


async def refuse_unknown_each_node(
    db: ScopedConnection,
    specs: Sequence[JobSpec],
    found: Mapping[bulk.Key, Row] | None = None,
) -> None:
    """``InvalidInput`` when a spec makes an every-node job (new, or converted: not one in
    ``found``, the existing rows by key, read here when not given) while a node of an
    older release runs; nothing is written."""
    made = [s for s in specs if s.each_node]
    if not made:
        return
    if found is None:
        found = await bulk.rows_named(db, [(s.tenant, s.name) for s in made])
    made = [s for s in made if not (found.get((s.tenant, s.name)) or {}).get("each_node")]
    if not made:
        return
    params = {"ns": db.settings.lock_namespace, "mark": EACH_NODE_MARK}
    older = [r["node_id"] for r in await db.all("nodes_without_each_node", params)]
    if older:
        raise InvalidInput(
            "each_node",
            f"node {', '.join(older)} runs a release that does not know every-node jobs and "
            f"would run {made[0].name!r} on one node only: upgrade it first",
        )
