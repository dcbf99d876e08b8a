"""Handlers of the alert end-to-end tests (a node imports them from its working directory,
the repository)."""

from __future__ import annotations

import os
from pathlib import Path

from node.handlers.context import RunContext


def fails_once(ctx: RunContext) -> None:
    """Fails the job's first run, succeeds from then on (a marker file in payload["dir"])."""
    marker = Path(ctx.payload["dir"]) / f"{ctx.tenant_id}.{ctx.job_name}"
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.close(fd)
    raise RuntimeError("first run fails")


def counts(ctx: RunContext) -> None:
    """Reports ``payload["rows"]`` as the metric ``rows``."""
    ctx.metric("rows", ctx.payload.get("rows", 0))
