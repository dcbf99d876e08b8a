"""A witness handler for end-to-end tests: records every execution outside the database.

It writes the same line as ``cluster.chaos.witness:record`` (one JSON object per
execution, appended to ``$PULSE_WITNESS_FILE`` with a single ``write``; ``sleep_s`` in the
payload makes the run that long), and can also fail on purpose: payload ``fail`` raises,
``exit`` calls ``sys.exit``.
"""

from __future__ import annotations

import sys
from typing import Any

from cluster.chaos import witness


def record(ctx: Any) -> None:
    witness.record(ctx)
    payload = ctx.payload
    if payload.get("fail"):
        raise RuntimeError(str(payload["fail"]))
    if "exit" in payload:
        sys.exit(payload["exit"])
