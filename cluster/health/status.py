"""What ``pulse status`` reports: one snapshot of the cluster's health, read-only.

Members come from the Redis registry (heartbeat ages by the Redis clock) and count as
alive only while their lock session exists in Postgres, as the nodes themselves judge.
Shard coverage comes from ``pg_locks`` (who holds what) against the ring over the alive
members (who should). Backlog, fire lag and outcomes come from the job and run tables.
The cluster is healthy when at least one node is alive and every shard is held. When
Redis cannot be read, the nodes holding shard locks count as the alive ones (they keep
serving what they hold without Redis).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from cluster.errors import MembershipError
from cluster.jobs.models import RUN_STATUSES
from cluster.members import MemberRegistry
from cluster.settings import DEFAULT_HEARTBEAT_TTL_S, ClusterSettings
from cluster.store.observe.snapshot import read_snapshot
from ring import Ring

LAG_WINDOW_S = 60.0
OUTCOME_WINDOW_S = 3600.0
HORIZON_S = 86400.0
PAUSED_SHOWN = 20


@dataclass(frozen=True)
class MemberView:
    node_id: str
    zone: str
    host: str
    pid: int
    version: str
    concurrency: int
    heartbeat_age_s: float
    has_session: bool
    shards_held: int
    runs_in_flight: int


@dataclass(frozen=True)
class Misplaced:
    shard: int
    holder: str
    owner: str


@dataclass(frozen=True)
class PausedJob:
    tenant: str
    name: str
    note: str | None


@dataclass(frozen=True)
class PinnedJob:
    """A job pinned to zones; unplaced while no alive node is in any of them."""

    tenant: str
    name: str
    zones: list[str]
    paused: bool
    placed: bool


@dataclass
class Status:
    cluster: str
    schema: str
    db_now: datetime
    shard_count: int
    members: list[MemberView]
    members_error: str | None
    alive_nodes: list[str]
    shards_held: int
    unheld: list[int]
    unheld_for_s: float | None
    misplaced: list[Misplaced]
    held_by_non_members: dict[str, int]
    in_flight_by_non_members: dict[str, int]
    backlog_due: int
    backlog_oldest_s: float | None
    lag_samples: int
    lag_p50_s: float | None
    lag_p99_s: float | None
    outcomes_1h: dict[str, int]
    paused_jobs: list[PausedJob] = field(default_factory=list)  # at most PAUSED_SHOWN
    paused_total: int = 0
    done_jobs: int = 0  # one-off jobs whose slot has run
    # Slots held by their upstreams, the oldest of them, and those a minute past their bound.
    held_slots: int = 0
    held_oldest: datetime | None = None
    held_overdue: int = 0
    fenced_writes: int = 0  # summed over live members, each since it started
    problems: list[str] = field(default_factory=list)
    holders: dict[int, str] = field(default_factory=dict)  # shard -> node; not in to_json
    pinned: list[PinnedJob] = field(default_factory=list)  # jobs pinned to zones

    @property
    def healthy(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        del data["holders"]
        data["db_now"] = self.db_now.isoformat()
        data["held_oldest"] = None if self.held_oldest is None else self.held_oldest.isoformat()
        data["healthy"] = self.healthy
        data["alive"] = len(self.alive_nodes)
        return data


class UnheldTracker:
    """Remembers since when each shard has been unheld, across refreshes of ``--watch``."""

    def __init__(self) -> None:
        self._since: dict[int, float] = {}

    def observe(self, unheld: list[int], now: float | None = None) -> float | None:
        """The longest time any of ``unheld`` has been seen unheld (None on first sight)."""
        now = time.monotonic() if now is None else now
        current = set(unheld)
        for shard in set(self._since) - current:
            del self._since[shard]
        for shard in current:
            self._since.setdefault(shard, now)
        if not current:
            return None
        longest = now - min(self._since[s] for s in current)
        return longest if longest > 0 else None


async def collect(
    settings: ClusterSettings,
    *,
    heartbeat_ttl_s: float = DEFAULT_HEARTBEAT_TTL_S,
    tracker: UnheldTracker | None = None,
    now: datetime | None = None,
) -> Status:
    """Read one snapshot; ``StoreError`` if Postgres cannot be read."""
    registry = MemberRegistry(settings)
    members_error = None
    try:
        live = await registry.live(heartbeat_ttl_s)
    except MembershipError as exc:
        live, members_error = [], str(exc)
    finally:
        await registry.close()
    rows = await read_snapshot(
        settings,
        [m.info.node_id for m in live],
        horizon_s=HORIZON_S,
        lag_window_s=LAG_WINDOW_S,
        outcome_window_s=OUTCOME_WINDOW_S,
        paused_limit=PAUSED_SHOWN,
        now=now,
    )
    shard_count = rows.shard_count

    holders = {r["shard"]: r["node_id"] for r in rows.holders if 0 <= r["shard"] < shard_count}
    held_count = Counter(holders.values())
    members = [
        MemberView(
            node_id=m.info.node_id,
            zone=m.info.zone,
            host=m.info.host,
            pid=m.info.pid,
            version=m.info.version,
            concurrency=m.info.concurrency,
            heartbeat_age_s=round(m.heartbeat_age_s, 3),
            has_session=m.info.node_id in rows.sessions,
            shards_held=held_count.get(m.info.node_id, 0),
            runs_in_flight=rows.in_flight.get(m.info.node_id, 0),
        )
        for m in live
    ]
    member_ids = {m.node_id for m in members}
    alive_ids = [m.node_id for m in members if m.has_session]
    if members_error and not alive_ids:
        # Redis is down: nodes keep serving the shards they hold, so count the lock holders.
        alive_ids = sorted(set(holders.values()))
    owners = Ring(alive_ids).assignment(shard_count) if alive_ids else {}
    owner_of = {shard: node for node, shards in owners.items() for shard in shards}
    unheld = [s for s in range(shard_count) if s not in holders]
    misplaced = [
        Misplaced(s, node, owner_of[s])
        for s, node in sorted(holders.items())
        if s in owner_of and owner_of[s] != node
    ]
    status = Status(
        cluster=settings.cluster,
        schema=settings.schema,
        db_now=rows.backlog["db_now"],
        shard_count=shard_count,
        members=sorted(members, key=lambda m: (m.zone, m.node_id)),
        members_error=members_error,
        alive_nodes=alive_ids,
        shards_held=len(holders),
        unheld=unheld,
        unheld_for_s=tracker.observe(unheld) if tracker else None,
        misplaced=misplaced,
        held_by_non_members={n: c for n, c in sorted(held_count.items()) if n not in member_ids},
        in_flight_by_non_members={
            str(n): c for n, c in sorted(rows.in_flight.items(), key=str) if n not in member_ids
        },
        backlog_due=rows.backlog["due"],
        backlog_oldest_s=rows.backlog["oldest_s"],
        lag_samples=rows.lag["samples"],
        lag_p50_s=rows.lag["p50_s"],
        lag_p99_s=rows.lag["p99_s"],
        outcomes_1h=dict.fromkeys(RUN_STATUSES, 0)
        | {r["status"]: r["runs"] for r in rows.outcomes},
        paused_jobs=[PausedJob(r["tenant_id"], r["name"], r["pause_note"]) for r in rows.paused],
        paused_total=rows.paused[0]["total"] if rows.paused else 0,
        done_jobs=rows.done,
        held_slots=rows.held["held"] if rows.held else 0,
        held_oldest=rows.held["oldest"] if rows.held else None,
        held_overdue=rows.held["overdue"] if rows.held else 0,
        fenced_writes=sum(m.info.fenced_writes for m in live),
        holders=holders,
    )
    alive_zones = {m.zone for m in members if m.node_id in alive_ids}
    status.pinned = [
        PinnedJob(
            r["tenant_id"],
            r["name"],
            list(r["zones"]),
            r["paused"],
            bool(alive_zones & set(r["zones"])),
        )
        for r in rows.pinned
    ]
    unplaced = [p for p in status.pinned if not p.placed and not p.paused]
    if not alive_ids:
        status.problems.append("no node is alive")
    if unplaced and alive_ids:
        names = ", ".join(f"{p.tenant}/{p.name}" for p in unplaced[:5])
        more = f" and {len(unplaced) - 5} more" if len(unplaced) > 5 else ""
        status.problems.append(
            f"{len(unplaced)} pinned jobs unplaced (no live node in their zones): {names}{more}"
        )
    if unheld:
        status.problems.append(f"{len(unheld)} of {shard_count} shards are held by no node")
    if status.held_overdue:
        status.problems.append(
            f"{status.held_overdue} slots still wait for their upstreams past their bound "
            "(after-timeout): no node has taken them to record them skipped"
        )
    return status
