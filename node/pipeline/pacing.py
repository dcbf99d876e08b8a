"""What the claim loop and the completer tell each other about timing, without either
calling the other.

The claim loop records whether it is catching up (its last claim was full: more is due)
and until when the runs it claimed ahead of their due time keep starting; the completer
reads that (``more_coming``) to let a write wait for more completions. The completer
reports the next slots it wrote (``due_at``): the claim that planned the loop's sleep saw
those jobs running. Guarded by tests/unit/test_pacing.py and
tests/integration/test_node_claimer.py.
"""

from __future__ import annotations

import asyncio
import math
import time
from datetime import datetime

from node.pipeline.clock import DbClock
from node.service import Signal, wait_any

# The loop wakes this long before the next job falls due, and the executor starts the
# jobs it claims when they fall due: the claim's round trip is paid before the slot, not
# after it.
CLAIM_AHEAD_S = 0.1
WAKE_MARGIN_S = 0.002


class Pacing:
    def __init__(self, clock: DbClock) -> None:
        self._clock = clock
        self.catching_up = False
        self.caught_up = Signal()  # set when catching up ends
        self._ahead_until = 0.0  # monotonic time the last run claimed ahead starts
        self._wake_at = math.inf  # monotonic time of the next planned claim
        self._sooner = Signal()

    def set_catching_up(self, full: bool) -> None:
        if full != self.catching_up:
            self.catching_up = full
            if not full:
                self.caught_up.set()

    def claimed_ahead(self, start_in_s: float) -> None:
        """A run was claimed that starts in ``start_in_s``."""
        self._ahead_until = max(self._ahead_until, time.monotonic() + start_in_s)

    @property
    def more_coming(self) -> bool:
        """More runs are about to finish: the claim loop is catching up, or runs it claimed
        ahead of their due time have yet to start."""
        return self.catching_up or time.monotonic() < self._ahead_until

    def due_at(self, when: datetime) -> None:
        """A job of this node falls due at ``when`` (database time): the claim loop claims
        then if that is sooner than it planned."""
        until = (when - self._clock.now()).total_seconds() - CLAIM_AHEAD_S
        at = time.monotonic() + until + WAKE_MARGIN_S
        if at < self._wake_at:
            self._wake_at = at
            self._sooner.set()

    async def sleep(self, delay_s: float, *events: asyncio.Event) -> None:
        """The claim loop's sleep: ``delay_s``, or less if ``due_at`` says so meanwhile, or
        until one of ``events``. ``due_at`` calls during the next claim count for the next
        sleep."""
        self._wake_at = min(self._wake_at, time.monotonic() + delay_s)
        while True:
            self._sooner.clear()
            await wait_any(self._wake_at - time.monotonic(), *events, self._sooner)
            if not self._sooner.is_set() or any(e.is_set() for e in events):
                break
        self._wake_at = math.inf
