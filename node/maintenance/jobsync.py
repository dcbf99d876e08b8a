"""``pulse node --sync-jobs``: at start, create the jobs of the node's registries that do
not exist yet, and warn about those whose applied definition differs, never overwriting
it (docs/design/python-api.md); and record the handlers the registries offer to the HTTP
API (docs/design/api-handlers.md). The store does the work (``Definitions.sync`` under an
advisory lock, ``RegisteredHandlers``); this module decides what a node does with the
outcome."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from cluster.errors import InvalidInput, StoreError
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store import JobStore

logger = logging.getLogger(__name__)


async def sync_jobs(
    cluster: ClusterSettings,
    node_id: str,
    specs: Sequence[JobSpec],
    handlers: Sequence[tuple[str, str]] = (),
) -> bool:
    """Sync ``specs`` and record ``handlers`` ((tenant, handler) pairs); False if the specs
    are bad input (the node refuses to start). A database error is logged and the node
    starts anyway: its jobs may well exist already."""
    if not specs and not handlers:
        return True
    try:
        async with JobStore.open(cluster, f"{node_id}/sync") as store:
            await store.revisions.act_as(node_id, "sync")
            result = await store.definitions.sync(specs)
            await store.handlers.register(handlers, node_id)
    except InvalidInput as exc:
        logger.error("refusing to start: invalid %s", exc, extra={"event": "config_error"})
        return False
    except StoreError as exc:
        logger.warning("jobs not synced: %s", exc, extra={"event": "sync_failed"})
        return True
    for label in result.differing:
        logger.warning(
            "job %s differs from its applied definition; left as applied "
            "(run `pulse jobs apply --module` to change it)",
            label,
            extra={"event": "sync_differs", "job": label},
        )
    logger.info(
        "jobs synced: %d created, %d unchanged, %d differ; %d handlers offered to the API",
        len(result.created),
        len(result.unchanged),
        len(result.differing),
        len(handlers),
        extra={"event": "jobs_synced"},
    )
    return True
