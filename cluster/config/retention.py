"""Run retention: the cluster's defaults (the ``config`` table, ``pulse config``), a job's
overrides, and the rule that says which runs are kept.

A run is kept while both hold:

- it is among the newest ``keep_runs`` runs of its job (by slot);
- its slot is no older than its job's ``keep_for`` (the job's own, else the cluster's),
  or, for a failed, timed-out or lost run, the longer of that and ``keep_failed_for``.

A job's ``keep_for`` replaces the cluster's for all its runs, and can only lengthen how
long its failures are kept. ``expired`` is the rule in Python; the ``prune_runs``
statement applies the same rule in SQL (tests/integration/test_prune.py compares them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cluster.errors import InvalidInput
from cluster.jobs.models import FAILURES
from cluster.timing.durations import format_duration, parse_duration

KEEP_FOR = "keep_for"
KEEP_RUNS = "keep_runs"
KEEP_FAILED_FOR = "keep_failed_for"
KEYS = (KEEP_FOR, KEEP_RUNS, KEEP_FAILED_FOR)

DEFAULT_KEEP_FOR_S = 30 * 86400.0
DEFAULT_KEEP_RUNS = 1000
DEFAULT_KEEP_FAILED_FOR_S = 90 * 86400.0
# Longer is read as this: a cutoff further back would leave Postgres's timestamp range.
MAX_KEEP_S = 36500 * 86400.0
MAX_KEEP_RUNS = 2**31 - 1  # Postgres integer


def _duration(key: str, text: str) -> float:
    seconds = parse_duration(text, key)
    if seconds <= 0:
        raise InvalidInput(key, "must be positive")
    if seconds > MAX_KEEP_S:
        raise InvalidInput(key, f"must be at most {format_duration(MAX_KEEP_S)}")
    return seconds


def _count(key: str, text: str) -> int:
    stripped = text.strip().replace("_", "")
    if not stripped.isascii() or not stripped.isdigit():
        raise InvalidInput(key, f"must be a whole number, got {text!r}")
    number = int(stripped)
    if number < 1:
        raise InvalidInput(key, "must be at least 1")
    if number > MAX_KEEP_RUNS:
        raise InvalidInput(key, f"must be at most {MAX_KEEP_RUNS}")
    return number


def canonical(key: str, text: str) -> str:
    """``text`` checked as the value of config ``key`` and written the way it is stored
    (``720h`` -> ``30d``); ``InvalidInput`` naming the key if either is bad."""
    if key not in KEYS:
        raise InvalidInput(key, f"unknown config key; use one of {', '.join(KEYS)}")
    if not isinstance(text, str):
        raise InvalidInput(key, "must be text")
    if key == KEEP_RUNS:
        return str(_count(key, text))
    return format_duration(_duration(key, text))


@dataclass(frozen=True)
class Retention:
    """The cluster's retention defaults, in seconds and runs."""

    keep_for_s: float = DEFAULT_KEEP_FOR_S
    keep_runs: int = DEFAULT_KEEP_RUNS
    keep_failed_for_s: float = DEFAULT_KEEP_FAILED_FOR_S

    @classmethod
    def from_config(cls, values: Mapping[str, str]) -> Retention:
        """From the ``config`` table's rows; a missing key keeps its default, keys of other
        features are ignored, a bad stored value is ``InvalidInput`` naming its key."""
        default = cls()
        return cls(
            keep_for_s=(
                _duration(KEEP_FOR, values[KEEP_FOR]) if KEEP_FOR in values else default.keep_for_s
            ),
            keep_runs=(
                _count(KEEP_RUNS, values[KEEP_RUNS]) if KEEP_RUNS in values else default.keep_runs
            ),
            keep_failed_for_s=(
                _duration(KEEP_FAILED_FOR, values[KEEP_FAILED_FOR])
                if KEEP_FAILED_FOR in values
                else default.keep_failed_for_s
            ),
        )

    def to_config(self) -> dict[str, str]:
        """The stored form of every key, as ``pulse init`` seeds and ``config show`` prints."""
        return {
            KEEP_FOR: format_duration(self.keep_for_s),
            KEEP_RUNS: str(self.keep_runs),
            KEEP_FAILED_FOR: format_duration(self.keep_failed_for_s),
        }

    def for_job(self, keep_for_s: float | None, keep_runs: int | None) -> JobRetention:
        """A job's retention: its own ``keep_for``/``keep_runs`` where set, else ours."""
        keep = min(keep_for_s if keep_for_s is not None else self.keep_for_s, MAX_KEEP_S)
        return JobRetention(
            keep_for_s=keep,
            keep_failed_for_s=min(max(keep, self.keep_failed_for_s), MAX_KEEP_S),
            keep_runs=keep_runs if keep_runs is not None else self.keep_runs,
        )


@dataclass(frozen=True)
class JobRetention:
    keep_for_s: float
    keep_failed_for_s: float
    keep_runs: int

    def expired(self, status: str, age_s: float, newer_runs: int) -> bool:
        """Whether a finished run goes: ``age_s`` since its slot, ``newer_runs`` runs of its
        job with a later slot."""
        if newer_runs >= self.keep_runs:
            return True
        keep_s = self.keep_failed_for_s if status in FAILURES else self.keep_for_s
        return age_s > keep_s
