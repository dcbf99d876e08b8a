"""Postgres: the only package that talks to psycopg. Connections, the named statements of
``sql/*.sql``, migrations, the job store, the node's lock session and result writer, run
records and LISTEN/NOTIFY. Driver errors become ``StoreError`` at this seam."""

from cluster.store.jobs import JobStore
from cluster.store.session import LockSession, SessionLost
from cluster.store.writer import ResultWriter

__all__ = ["JobStore", "LockSession", "ResultWriter", "SessionLost"]
