"""Failed sign-ins, remembered for a window, per source address and per presented token
prefix: a failing presentation from a source or of a prefix past the limit is answered 429
until its oldest failure leaves the window.

Only failures are throttled. A presented token is always looked up, and a valid one
is let in whatever failed before it from its address: behind a proxy, or a NAT, many
clients share one address, and one of them guessing must not lock the others out. The
prefix (the first characters after ``pulse_``) catches the same guesses spread over many
addresses; a real token is 256 random bits, so its prefix tells nothing about it.

Kept in the process: each replica limits on its own, so behind a load balancer of N replicas
a source gets at most N times the limit. Bounded memory: at most ``MAX_KEYS`` sources and as
many prefixes, the least recently failing dropped first, each remembering at most its limit
of failures.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque

from cluster.web.tokens import PREFIX

MAX_KEYS = 10_000
PREFIX_CHARS = 6
DEFAULT_AUTH_FAILURES = 10
DEFAULT_AUTH_WINDOW_S = 60.0


class FailureLimiter:
    """The recent failures of each key (an address, a prefix), at most ``max_failures``."""

    def __init__(
        self,
        max_failures: int = DEFAULT_AUTH_FAILURES,
        window_s: float = DEFAULT_AUTH_WINDOW_S,
        max_keys: int = MAX_KEYS,
    ) -> None:
        self.max_failures = max_failures
        self.window_s = window_s
        self.max_keys = max_keys
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._failures)

    def _recent(self, key: str, now: float) -> deque[float] | None:
        times = self._failures.get(key)
        if times is None:
            return None
        while times and times[0] <= now - self.window_s:
            times.popleft()
        if not times:
            del self._failures[key]
            return None
        return times

    def retry_after_s(self, key: str, now: float | None = None) -> float | None:
        """None while ``key`` may try; else the seconds until it may again."""
        now = time.monotonic() if now is None else now
        times = self._recent(key, now)
        if times is None or len(times) < self.max_failures:
            return None
        return max(times[0] + self.window_s - now, 0.001)

    def failed(self, key: str, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        times = self._recent(key, now) or deque(maxlen=self.max_failures)
        times.append(now)
        self._failures[key] = times
        self._failures.move_to_end(key)
        while len(self._failures) > self.max_keys:
            self._failures.popitem(last=False)


def prefix_of(secret: str) -> str:
    """The part of a presented secret failures are counted under, besides its source."""
    return secret.removeprefix(PREFIX)[:PREFIX_CHARS]


class SignInThrottle:
    """Failed sign-ins by source address and by token prefix, each with its own limiter."""

    def __init__(
        self,
        max_failures: int = DEFAULT_AUTH_FAILURES,
        window_s: float = DEFAULT_AUTH_WINDOW_S,
    ) -> None:
        self.sources = FailureLimiter(max_failures, window_s)
        self.prefixes = FailureLimiter(max_failures, window_s)

    def refused(self, source: str, secret: str, now: float | None = None) -> float | None:
        """Count one failed presentation of ``secret`` from ``source``; the seconds to wait
        if either was already past the limit (answer 429), else None (answer 401)."""
        now = time.monotonic() if now is None else now
        prefix = prefix_of(secret)
        waits = [
            wait
            for wait in (
                self.sources.retry_after_s(source, now),
                self.prefixes.retry_after_s(prefix, now),
            )
            if wait is not None
        ]
        self.sources.failed(source, now)
        self.prefixes.failed(prefix, now)
        return max(waits) if waits else None


DEFAULT_PINGS_PER_TOKEN = 60
DEFAULT_PINGS_PER_SOURCE = 1200
PING_WINDOW_S = 60.0


class PingRate:
    """Pings (``/api/ping/...``, no API token) in a sliding window, counted apart: each
    presented token, known or not, against its own limit before any database work; and
    per source address only the pings whose token no job has. Past either limit, 429. So
    a flood of guesses from one address (a NAT, a proxy) never locks out the valid pings
    that come from it, and each valid token is limited on its own."""

    def __init__(
        self,
        per_token: int = DEFAULT_PINGS_PER_TOKEN,
        per_source: int = DEFAULT_PINGS_PER_SOURCE,
        window_s: float = PING_WINDOW_S,
    ) -> None:
        self.tokens = FailureLimiter(per_token, window_s)
        self.sources = FailureLimiter(per_source, window_s)

    def refused(self, token_key: str, now: float | None = None) -> float | None:
        """Count one ping of a token; the seconds to wait if it is past its limit."""
        now = time.monotonic() if now is None else now
        wait = self.tokens.retry_after_s(token_key, now)
        if wait is None:
            self.tokens.failed(token_key, now)
        return wait

    def unknown(self, source: str, now: float | None = None) -> float | None:
        """Count a ping from ``source`` whose token no job has; the seconds to wait if the
        source was past its limit of those already."""
        now = time.monotonic() if now is None else now
        wait = self.sources.retry_after_s(source, now)
        self.sources.failed(source, now)
        return wait
