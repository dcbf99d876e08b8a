"""The witness handler of chaos runs: appends every execution to a file outside the database.

``cluster.chaos.witness:record`` writes one JSON line per execution (job, tenant, slot,
attempt, node, zone, start time) to ``$PULSE_WITNESS_FILE`` with a single ``write`` on an
``O_APPEND`` descriptor, so lines of concurrent processes never interleave, then sleeps
``payload["sleep_s"]`` seconds; payload ``fail`` makes it raise, ``exit`` call ``sys.exit``
(tests use both). The checker compares these lines with the runs table.
It lives in the package (not in ``tests``) so an installed ``pulse chaos`` can use it.

The descriptor stays open, one per file for the life of the process (a node witnesses
into one file, a test process into one per test). Opening and closing the file around
every line tripled a run's system calls, and a sync handler on a handler thread hands
the GIL over at each: the witness alone was a third of a node's CPU per run in the
benchmarks. A line is in the kernel once ``write`` returns: a SIGKILL loses nothing.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

_lock = threading.Lock()
_descriptors: dict[str, int] = {}  # path -> descriptor, never closed (see above)


def _descriptor(path: str) -> int:
    fd = _descriptors.get(path)
    if fd is None:
        with _lock:
            fd = _descriptors.get(path)
            if fd is None:
                flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
                fd = _descriptors[path] = os.open(path, flags, 0o644)
    return fd


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
    os.write(_descriptor(os.environ["PULSE_WITNESS_FILE"]), (line + "\n").encode())
    sleep_s = float(ctx.payload.get("sleep_s") or 0)
    if sleep_s > 0:
        time.sleep(sleep_s)
    if ctx.payload.get("fail"):
        raise RuntimeError(str(ctx.payload["fail"]))
    if "exit" in ctx.payload:
        sys.exit(ctx.payload["exit"])
