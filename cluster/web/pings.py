"""``/api/ping/{token}``: the check-ins of watch jobs, from crons Pulse does not run.

No API token: the ping token in the path is the credential, and it names one job. A ping
(``POST``, or ``GET`` for the simplest ``curl``) records the end of a run, ``/start`` its
start, ``/fail`` a failed end; the body is kept as the run's output (scrubbed, cut to the
job's ``output_limit``). An unknown token and a malformed one get the same 404, after the
same hash and lookup, so an answer never tells whether a job exists. Rate-limited per
token before any database work, and per source for unknown tokens only
(``cluster.web.limits.PingRate``): guesses from a NAT never lock out its valid pings.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from fastapi import APIRouter, HTTPException, Request

from cluster.web.auth import source_of
from cluster.web.state import state_of

logger = logging.getLogger(__name__)

router = APIRouter(tags=["pings"])
PREFIX = "/api/ping/"

# The most of a token looked at: a real one is 43 characters.
MAX_TOKEN_CHARS = 128
NOT_FOUND = "no such ping URL"
SUFFIXES = {"start": "start", "fail": "fail"}


async def _ping(request: Request, token: str, kind: str) -> dict[str, Any]:
    state = state_of(request)
    token = token[:MAX_TOKEN_CHARS]
    key = hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()[:16]
    _limit(state.pings.refused(key))
    body = await request.body()
    async with state.pool.store() as store:
        ping = await store.watch.ping(token, kind, body)
    if ping is None:
        _limit(state.pings.unknown(source_of(request)))
        raise HTTPException(404, NOT_FOUND)
    logger.info(
        "%s ping for slot %s: %s",
        kind,
        ping.slot.isoformat(),
        ping.outcome,
        extra={"event": "ping", "job": ping.job.name, "tenant": ping.job.tenant},
    )
    return {"status": ping.outcome, "slot": ping.slot.isoformat()}


def _limit(wait_s: float | None) -> None:
    if wait_s is not None:
        raise HTTPException(
            429, "too many pings; try again later", headers={"Retry-After": str(int(wait_s) + 1)}
        )


@router.api_route("/api/ping/{path:path}", methods=["POST", "GET"])
async def ping(request: Request, path: str) -> dict[str, Any]:
    """A ping: ``TOKEN`` the end of a successful run, ``TOKEN/start`` its start,
    ``TOKEN/fail`` a failed end. One route for every path, so a malformed one (slashes,
    dot segments, a trailing slash) takes the same way to the same 404 as an unknown one."""
    token, _, suffix = path.rpartition("/")
    kind = SUFFIXES.get(suffix) if token else None
    return await _ping(request, token if kind else path, kind or "success")


def masked_path(path: str) -> str:
    """A request path as logs may show it: a ping URL's token replaced by ``***``."""
    if not path.startswith(PREFIX):
        return path
    _, _, suffix = path[len(PREFIX) :].partition("?")[0].rpartition("/")
    return PREFIX + "***" + (f"/{suffix}" if suffix in SUFFIXES else "")


class PingPathFilter(logging.Filter):
    """Hides ping tokens in uvicorn's access log, whose record's third argument is the
    request's path (installed by ``cluster.web.server``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            record.args = (*args[:2], masked_path(args[2]), *args[3:])
        return True
