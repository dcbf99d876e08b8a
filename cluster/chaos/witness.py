"""The witness handler of chaos runs: appends every execution to a file outside the database.

``cluster.chaos.witness:record`` writes one JSON line per execution (job, tenant, slot,
attempt, node, zone, start time) to ``$PULSE_WITNESS_FILE`` with a single ``write`` on an
``O_APPEND`` descriptor, so lines of concurrent processes never interleave, then sleeps
``payload["sleep_s"]`` seconds. The checker compares these lines with the runs table.
It lives in the package (not in ``tests``) so an installed ``pulse chaos`` can use it.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any


def record(ctx: Any) -> None:
    line = json.dumps(
        {
            "job": ctx.job_name,
            "tenant": ctx.tenant_id,
            "slot": ctx.scheduled_for.isoformat(),
            "attempt": ctx.attempt,
            "node": ctx.node_id,
            "zone": getattr(ctx, "zone", None),
            "at": time.time(),
        }
    )
    fd = os.open(os.environ["PULSE_WITNESS_FILE"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)
    sleep_s = float(ctx.payload.get("sleep_s") or 0)
    if sleep_s > 0:
        time.sleep(sleep_s)
