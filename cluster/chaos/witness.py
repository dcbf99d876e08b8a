"""The witness of chaos runs, benchmarks and end-to-end tests: a record of every handler
start kept outside the database, and its reader.

``cluster.chaos.witness:record`` is a handler that writes one JSON line per execution (job,
tenant, slot, attempt, node, zone, start time) to ``$PULSE_WITNESS_FILE`` with a single
``write`` on an ``O_APPEND`` descriptor, so lines of concurrent processes never interleave,
then sleeps ``payload["sleep_s"]`` seconds; payload ``fail`` makes it raise, ``exit`` call
``sys.exit`` (tests use both), and ``crash`` end its whole process with ``os._exit`` (the
poison job of ``pulse chaos`` and tests/e2e/test_poison.py). ``read_witness`` turns a file
back into ``Execution``s, which the checkers compare with the runs table. It lives in the
package (not in ``tests``) so an installed ``pulse chaos`` can use it.

The descriptor stays open, one per file for the life of the process (a node witnesses
into one file, a test process into one per test): opening and closing it around every line
would add system calls to every run being measured. A line is in the kernel once ``write``
returns: a SIGKILL loses nothing.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

_lock = threading.Lock()
_descriptors: dict[str, int] = {}  # path -> descriptor, never closed (see above)


@dataclass(frozen=True)
class Execution:
    """One witness line: a handler started for (job, slot, attempt) on a node."""

    job: str
    tenant: str
    slot: datetime
    attempt: int
    node: str
    zone: str | None
    at: float  # epoch seconds on the node's clock

    @property
    def lag_s(self) -> float:
        """How long after its slot the handler started."""
        return self.at - self.slot.timestamp()


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
    witness_line(ctx)
    hold(ctx)
    act_on_payload(ctx)


def witness_line(ctx: Any, suffix: str = "") -> None:
    """Append the run's witness line (the first thing any chaos handler does); with
    ``suffix``, to ``$PULSE_WITNESS_FILE`` + suffix (a handler's end lines, say)."""
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
    os.write(_descriptor(os.environ["PULSE_WITNESS_FILE"] + suffix), (line + "\n").encode())


def hold(ctx: Any) -> None:
    """Sleep ``payload["sleep_s"]`` seconds: the run's length."""
    sleep_s = float(ctx.payload.get("sleep_s") or 0)
    if sleep_s > 0:
        time.sleep(sleep_s)


def act_on_payload(ctx: Any) -> None:
    """Fail, exit or crash as the payload asks (after the run's work)."""
    if ctx.payload.get("fail"):
        raise RuntimeError(str(ctx.payload["fail"]))
    if "exit" in ctx.payload:
        sys.exit(ctx.payload["exit"])
    if "crash" in ctx.payload:
        os._exit(int(ctx.payload["crash"]))


def read_witness(path: Path) -> list[Execution]:
    """Every execution witnessed in ``path``, in the order written (none if it is absent)."""
    if not path.exists():
        return []
    with path.open("rb") as lines:
        return [_parse(json.loads(line)) for line in lines if line.strip()]


def _parse(row: dict[str, Any]) -> Execution:
    return Execution(
        job=row["job"],
        tenant=row["tenant"],
        slot=datetime.fromisoformat(row["slot"]),
        attempt=int(row["attempt"]),
        node=str(row["node"]),
        zone=row["zone"],
        at=float(row["at"]),
    )
