"""Reading a pg_auto_failover monitor's events for spans in which acknowledged commits
could be lost (``cluster.chaos.servers.pgha.lossy_spans_in``; pure: the events are given)."""

from __future__ import annotations

from datetime import UTC, datetime

from cluster.chaos.servers.pgha import LossySpan, lossy_spans_in


def event(n: int, second: float, node: str, reported: str, goal: str) -> dict[str, object]:
    return {
        "eventid": n,
        "eventtime": f"2026-12-06T12:00:{second:09.6f}+00:00",
        "nodename": node,
        "reportedstate": reported,
        "goalstate": goal,
    }


START = [  # a formation coming up: n1 waits for its standby, then takes it in its quorum
    ("n1", "init", "single"),
    ("n1", "single", "single"),
    ("n2", "wait_standby", "wait_standby"),
    ("n1", "single", "wait_primary"),
    ("n1", "wait_primary", "wait_primary"),
    ("n2", "catchingup", "secondary"),
    ("n2", "secondary", "secondary"),
    ("n1", "wait_primary", "primary"),
    ("n1", "primary", "primary"),
]
SWITCHOVER = [  # n1 steps down, n2 is promoted and waits for n1 to rejoin as its standby
    ("n1", "primary", "draining"),
    ("n2", "secondary", "prepare_promotion"),
    ("n2", "prepare_promotion", "stop_replication"),
    ("n1", "draining", "demote_timeout"),
    ("n2", "stop_replication", "wait_primary"),
    ("n1", "demote_timeout", "demoted"),
    ("n2", "wait_primary", "wait_primary"),
    ("n1", "catchingup", "secondary"),
    ("n2", "wait_primary", "primary"),
    ("n2", "primary", "primary"),
]


def second(n: int) -> float:
    return datetime(2026, 12, 6, 12, 0, n, tzinfo=UTC).timestamp()


def events(*steps: tuple[str, str, str]) -> list[dict[str, object]]:
    return [event(i + 1, float(i), *step) for i, step in enumerate(steps)]


def test_a_clean_switchover_loses_nothing() -> None:
    assert lossy_spans_in(events(*START, *SWITCHOVER)) == []


def test_a_standby_taken_out_of_the_quorum_and_then_promoted_loses_the_span() -> None:
    # The monitor finds n2 unhealthy and disables synchronous replication on n1 (step 9);
    # a switchover then promotes n2 anyway: n1's commits from step 9 on may be gone.
    lapse = [("n1", "primary", "wait_primary"), ("n1", "wait_primary", "wait_primary")]
    # n2 reports wait_primary, promoted, at step 17.
    assert lossy_spans_in(events(*START, *lapse, *SWITCHOVER)) == [
        LossySpan("n1", began=second(9), ended=second(17))
    ]


def test_a_standby_back_in_the_quorum_closes_the_lapse() -> None:
    lapse = [
        ("n1", "primary", "wait_primary"),
        ("n1", "wait_primary", "wait_primary"),
        ("n1", "wait_primary", "primary"),
        ("n1", "primary", "primary"),
    ]
    assert lossy_spans_in(events(*START, *lapse, *SWITCHOVER)) == []


def test_a_survivor_alone_after_a_kill_loses_nothing() -> None:
    # n1's host is killed; n2 is promoted and takes writes alone, and nobody replaces it.
    kill = [
        ("n2", "secondary", "prepare_promotion"),
        ("n2", "stop_replication", "wait_primary"),
        ("n2", "wait_primary", "wait_primary"),
    ]
    assert lossy_spans_in(events(*START, *kill)) == []
