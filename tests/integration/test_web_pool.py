"""The connections ``pulse web`` borrows (``cluster/store/jobstore/pool.py``): a statement a
client causes ends after a few seconds, so no request holds a pooled connection for long."""

from __future__ import annotations

from cluster.settings import ClusterSettings
from cluster.store.jobstore.pool import WEB_STATEMENT_TIMEOUT_S, StorePool
from cluster.store.jobstore.store import JobStore


async def test_the_webs_statements_time_out_after_five_seconds(
    settings: ClusterSettings, store: JobStore
) -> None:
    pool = StorePool(settings)
    await pool.open()
    try:
        async with pool.store() as borrowed:
            cur = await borrowed.db.conn.execute("SHOW statement_timeout")
            row = await cur.fetchone()
    finally:
        await pool.close()
    assert WEB_STATEMENT_TIMEOUT_S == 5.0
    assert row is not None and row["statement_timeout"] == "5s"
