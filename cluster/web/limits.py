"""Failed authentications per source address, remembered for a window: an address past the
limit is refused (429) until its oldest failure leaves the window.

Kept in the process: each replica limits on its own, so behind a load balancer of N replicas
an address gets at most N times the limit. Bounded memory: at most ``MAX_SOURCES`` addresses
are tracked, the least recently failing dropped first.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque

MAX_SOURCES = 10_000
DEFAULT_AUTH_FAILURES = 10
DEFAULT_AUTH_WINDOW_S = 60.0


class FailureLimiter:
    def __init__(
        self,
        max_failures: int = DEFAULT_AUTH_FAILURES,
        window_s: float = DEFAULT_AUTH_WINDOW_S,
    ) -> None:
        self.max_failures = max_failures
        self.window_s = window_s
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def _recent(self, source: str, now: float) -> deque[float] | None:
        times = self._failures.get(source)
        if times is None:
            return None
        while times and times[0] <= now - self.window_s:
            times.popleft()
        if not times:
            del self._failures[source]
            return None
        return times

    def retry_after_s(self, source: str, now: float | None = None) -> float | None:
        """None while ``source`` may try; else the seconds until it may again."""
        now = time.monotonic() if now is None else now
        times = self._recent(source, now)
        if times is None or len(times) < self.max_failures:
            return None
        return max(times[0] + self.window_s - now, 0.001)

    def failed(self, source: str, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        times = self._recent(source, now) or deque()
        times.append(now)
        self._failures[source] = times
        self._failures.move_to_end(source)
        while len(self._failures) > MAX_SOURCES:
            self._failures.popitem(last=False)
