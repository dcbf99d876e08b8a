"""The effect jobs of ``pulse chaos``: a handler that writes one row per run into a user
table through ``ctx.transaction()``, so the checks can prove that each slot's effect
committed exactly once under the same faults that make execution at least once.

``cluster.chaos.ledger:record`` writes its witness line first (so every execution is
witnessed, as with ``witness:record``), then opens the run's transaction, inserts (job,
slot, attempt, fencing token, node) into the ledger table (``cluster.store.observe.ledger``) and
holds the transaction open for ``payload["sleep_s"]`` seconds, so faults hit runs whose
effects are written but not yet committed. Pulse commits the row with the run's fenced
completion, or rolls it back.
"""

from __future__ import annotations

from typing import Any

from cluster.chaos import witness
from cluster.store.observe.ledger import INSERT

HANDLER = "cluster.chaos.ledger:record"


def record(ctx: Any) -> None:
    witness.witness_line(ctx)
    with ctx.transaction() as conn:
        row = (ctx.job_name, ctx.scheduled_for, ctx.attempt, ctx.fencing_token, ctx.node_id)
        conn.execute(INSERT, row)
        witness.hold(ctx)
        witness.act_on_payload(ctx)
