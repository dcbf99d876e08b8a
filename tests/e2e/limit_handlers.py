"""Handlers of the named-limit end-to-end tests (imported by node processes).

``span`` is the chaos witness (a start line in ``$PULSE_WITNESS_FILE``, then it holds for
``payload["sleep_s"]``) that also writes when it ends, to ``$PULSE_WITNESS_FILE.ends``, with
one ``write`` on an ``O_APPEND`` descriptor like the witness: the test pairs each start with
its end and counts the runs in flight at once by the handlers' own clock. A run whose node
was killed has no end line: it ended with its node.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from cluster.chaos.witness import hold, witness_line


def span(ctx: Any) -> None:
    witness_line(ctx)
    hold(ctx)
    line = json.dumps(
        {
            "job": ctx.job_name,
            "tenant": ctx.tenant_id,
            "slot": ctx.scheduled_for.isoformat(),
            "attempt": ctx.attempt,
            "node": ctx.node_id,
            "at": time.time(),
        }
    )
    fd = os.open(os.environ["PULSE_WITNESS_FILE"] + ".ends", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)
