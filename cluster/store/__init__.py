"""Postgres: the only package that talks to psycopg. Driver errors become ``StoreError`` at
this seam.

The root holds the plumbing every room shares: connections (``connect``, ``side``,
``deadline``), the named statements of ``sql/*.sql`` (``queries``), LISTEN/NOTIFY
(``notify``) and the cluster's settings table (``config``). The rooms, each a package, are
``schema`` (migrations, roles), ``lock`` (the node's lock session and writer: the hot path),
``jobstore`` (the admin ``JobStore`` and its parts), ``housekeeping`` (a node's side work),
``observe`` (status and diagnostics) and ``access`` (the web's tokens and sessions). Their
direction is an import contract in pyproject.toml (docs/design/code.md)."""

from cluster.store.jobstore.store import JobStore
from cluster.store.lock.session import LockSession, SessionLost
from cluster.store.lock.writer import ResultWriter

__all__ = ["JobStore", "LockSession", "ResultWriter", "SessionLost"]
