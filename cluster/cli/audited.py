"""The audit rows of changes made from the command line: tokens, config and tenants' limits
and quotas are changed on a host with the database's credentials, and each change writes
its row to the audit trail (``api_audit``) in its own transaction, as the API's do.

The actor is ``cli:<os user>`` and the source the host name: who ran the command, as far
as this host can tell (the database is trusted, so this is a record, not a control). No
secret goes into a row: a token's secret never, a config value only for the keys known to
hold none (``cluster.config.keys.audit_text``).
"""

from __future__ import annotations

import getpass
import socket

from cluster.store.jobstore.store import JobStore


def os_user() -> str:
    """Who runs this command, as this host names them (``unknown`` if it cannot): what
    the audit rows and the job revisions of the command's changes record."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry and no LOGNAME/USER
        return "unknown"


def actor() -> str:
    """``cli:<os user>``, or ``cli:unknown`` when the user has no name here."""
    return f"cli:{os_user()}"


async def record(
    store: JobStore,
    action: str,
    *,
    tenant: str | None = None,
    job: str | None = None,
    detail: str | None = None,
) -> None:
    """Write the audit row of a change made by this command, in the caller's transaction."""
    await store.access.audit(
        actor(), action, tenant=tenant, job=job, source=socket.gethostname(), detail=detail
    )
