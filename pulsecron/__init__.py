"""Pulse's public Python API: ``import pulsecron``.

Everything an application needs, under the distribution's own name: define jobs in code
(``Registry``), manage them at run time (``JobStore``, ``JobSpec``), write handlers
(``RunContext``), host a node on the application's event loop (``Node``), configure
(``ClusterSettings``, ``NodeSettings``) and catch Pulse's errors. The implementation lives
in ``ring``, ``cluster`` and ``node``; names outside ``__all__`` are internal and may change.
``tests/unit/test_public_api.py`` keeps this list and its signatures stable.

    from pulsecron import Registry, RunContext

    jobs = Registry(tenant="acme")

    @jobs.cron("0 * * * *", catch_up="backfill", timeout="10m")
    async def billing_rollup(ctx: RunContext) -> dict[str, int]: ...
"""

from __future__ import annotations

from importlib import metadata

from cluster.errors import (
    ConfigError,
    InvalidInput,
    MembershipError,
    NotFound,
    PulseError,
    StoreError,
)
from cluster.jobs.models import Job, Run
from cluster.jobs.registry import Registry
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings, NodeSettings
from cluster.store.jobstore.specs import ApplyResult, SyncResult
from cluster.store.jobstore.store import JobStore
from node.handlers.context import RunContext, Skip
from node.hosted import HostedNode as Node
from node.hosted import NodeStatus

try:
    __version__ = metadata.version("pulsecron")
except metadata.PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "ApplyResult",
    "ClusterSettings",
    "ConfigError",
    "InvalidInput",
    "Job",
    "JobSpec",
    "JobStore",
    "MembershipError",
    "Node",
    "NodeSettings",
    "NodeStatus",
    "NotFound",
    "PulseError",
    "Registry",
    "Run",
    "RunContext",
    "Skip",
    "StoreError",
    "SyncResult",
    "__version__",
]
