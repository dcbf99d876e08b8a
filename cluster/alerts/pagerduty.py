"""The body of a ``pagerduty`` rule's request: a PagerDuty Events API v2 event.

One incident per rule and job: the dedup key is ``pulse/<rule>/<tenant>/<job>``, so a
job's later failures add to the open incident instead of opening new ones, and its
``recovered`` event resolves it (``resolve`` with the same key). ``failed``, ``lost`` and
``paused`` trigger at severity ``error``, ``late`` and ``skipped`` at ``warning``. The
routing key is read from the delivering node's environment (the rule's ``secret_env``)
and goes only into this body, which is never logged or stored.
"""

from __future__ import annotations

import json
from typing import Any

from cluster.alerts.rules import AlertEvent

RESOLVES = frozenset({"recovered"})
SEVERITY = {
    "failed": "error",
    "lost": "error",
    "paused": "error",
    "late": "warning",
    "skipped": "warning",
    "test": "info",
}


def dedup_key(rule: str, event: AlertEvent) -> str:
    """The same for every event of one job to one rule (PagerDuty allows 255 characters)."""
    return f"pulse/{rule}/{event.tenant}/{event.job}"[:255]


def action(event: AlertEvent) -> str:
    return "resolve" if event.event in RESOLVES else "trigger"


def body(rule: str, event: AlertEvent, routing_key: str) -> bytes:
    """The Events API v2 request body of ``event`` for ``rule``."""
    found: dict[str, Any] = {
        "routing_key": routing_key,
        "event_action": action(event),
        "dedup_key": dedup_key(rule, event),
    }
    if found["event_action"] == "trigger":
        found["payload"] = {
            "summary": event.summary(),
            "source": event.node or "pulse",
            "severity": SEVERITY.get(event.event, "error"),
            "timestamp": event.created_at.isoformat(),
            "component": event.job,
            "group": event.tenant,
            "class": event.event,
            "custom_details": event.to_json(),
        }
    return json.dumps(found, ensure_ascii=False, sort_keys=True).encode()
