"""A witness handler for end-to-end tests: appends every execution to a file.

The file (``PULSE_WITNESS_FILE``) lives outside the database, so tests can check what ran
independently of what Pulse recorded. Each line is one JSON object, written with a single
``write`` on an ``O_APPEND`` descriptor so concurrent processes never interleave lines.
Payload keys: ``sleep_s`` (run this long), ``fail`` (raise), ``exit`` (call sys.exit).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any


def record(ctx: Any) -> None:
    path = os.environ["PULSE_WITNESS_FILE"]
    line = json.dumps(
        {
            "job": ctx.job_name,
            "tenant": ctx.tenant_id,
            "slot": ctx.scheduled_for.isoformat(),
            "attempt": ctx.attempt,
            "node": ctx.node_id,
            "zone": ctx.zone,
            "at": time.time(),
        }
    )
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)
    payload = ctx.payload
    if payload.get("sleep_s"):
        time.sleep(float(payload["sleep_s"]))
    if payload.get("fail"):
        raise RuntimeError(str(payload["fail"]))
    if "exit" in payload:
        sys.exit(payload["exit"])
