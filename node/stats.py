"""Counters a node keeps about itself; the metrics endpoint and logs read them.

Plain numbers updated from the event loop only, so no locks are needed. Fire lag samples
are kept in a bounded window.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field


@dataclass
class Stats:
    fired: int = 0
    fenced_writes: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    skipped_slots: int = 0
    retries: int = 0
    recovered: int = 0
    leases_lost: int = 0
    locks_acquired: int = 0
    locks_released: int = 0
    locks_lost: int = 0
    membership_changes: int = 0
    db_errors: int = 0
    redis_errors: int = 0
    claims: int = 0
    runs_pruned: int = 0
    # Alert deliveries by result (delivered, retried, failed); late slots this node found.
    alerts: Counter[str] = field(default_factory=Counter)
    late_slots: int = 0
    # The runs table as the pruner last measured it (None until it has).
    runs_table_rows: float | None = None
    runs_table_bytes: int | None = None
    claim_seconds: deque[float] = field(default_factory=lambda: deque(maxlen=4096))
    fire_lag_seconds: deque[float] = field(default_factory=lambda: deque(maxlen=4096))
