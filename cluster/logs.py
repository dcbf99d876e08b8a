"""Log output for the CLI and nodes: plain text or JSON lines, configured in one place.

Modules only call ``logging.getLogger(__name__)`` with an ``event`` in ``extra``; the
formatters here add node, job and slot fields when a record carries them.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

_CONTEXT_FIELDS = ("node_id", "zone", "job", "tenant", "slot", "attempt", "shard")
_STD_ATTRS = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STD_ATTRS and not key.startswith("_"):
                out[key] = value if isinstance(value, int | float | bool | None) else str(value)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        context = [
            f"{key}={getattr(record, key)}" for key in _CONTEXT_FIELDS if hasattr(record, key)
        ]
        return f"{line} [{' '.join(context)}]" if context else line


def configure(fmt: str = "text", level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # httpx logs every request's full URL at INFO: a webhook's may carry a token.
    for noisy in ("asyncio", "psycopg", "psycopg.pool", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
