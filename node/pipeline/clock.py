"""The database clock as seen from this node: Postgres time estimated between round trips.

Correctness never depends on it (due-ness and leases are judged in SQL); it only tells the
node how long to sleep and what "now" the catch-up policy should assume.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta


class DbClock:
    def __init__(self) -> None:
        self._offset = timedelta(0)

    def observe(self, db_now: datetime) -> None:
        self._offset = timedelta(seconds=db_now.timestamp() - time.time())

    def now(self) -> datetime:
        return datetime.now(UTC) + self._offset
