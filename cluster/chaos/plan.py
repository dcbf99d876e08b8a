"""The seeded fault plan: which fault, when, against whom, for how long (pure, no I/O).

Faults run one after another, each followed by time to settle, so every disruption can be
attributed to exactly one fault. The plan covers every requested kind once in a seeded
order, then repeats shuffled rounds while they fit in the run's duration. Each fault
carries its failover bound: how late the affected jobs may fire after it starts.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from cluster.chaos import poison
from cluster.errors import InvalidInput
from cluster.settings import DEFAULT_FREEZE_LIMIT_S, DEFAULT_HEARTBEAT_TTL_S

KINDS = (
    "sigkill",
    "sigstop",
    "sigstop-short",
    "zone-kill",
    "pg-stall",
    "pg-blip",
    "pg-terminate",
    "redis-cut",
    "redis-restart",
    "pg-restart",
    "poison-job",
    "pg-failover",
    "redis-failover",
)
RESTART_KINDS = frozenset({"redis-restart", "pg-restart", "pg-failover", "redis-failover"})
# A failover needs a primary and a standby the harness starts: pg_auto_failover for
# pg-failover (only with --pg-ha), Redis Sentinel for redis-failover. Nodes then reach the
# servers directly (a proxy cannot follow a primary), so the faults of one server or of
# one node's proxy do not apply to that store.
HA_KINDS = frozenset({"pg-failover", "redis-failover"})
SINGLE_PG_KINDS = frozenset({"pg-stall", "pg-blip", "pg-restart"})
SINGLE_REDIS_KINDS = frozenset({"redis-cut", "redis-restart"})
# Time after a failover's hold for the lost server to rejoin as a standby.
REJOIN_S = {"pg-failover": 8.0, "redis-failover": 4.0}
SETTLE_S = 6.0
GAP_S = (2.0, 5.0)
START_S = 3.0
TAIL_S = 6.0
# A network blip on one node's Postgres connections: shorter than the shard keeper's grace
# for a member whose session is missing, so no shard may move (docs/design/recovery.md).
BLIP_S = 1.5
# How much later than a death a stall is noticed: the stalled node's next statement (within
# its idle claim interval, 2 s) goes unanswered for the freeze limit; then, as after a kill,
# a beat reports it and a peer ends its session (docs/design/failover.md).
STALL_NOTICE_S = 2.0 + DEFAULT_FREEZE_LIMIT_S


@dataclass(frozen=True)
class Bounds:
    """Failover bounds in seconds (options of ``pulse chaos``)."""

    kill_s: float  # after SIGKILL of a node or a zone, and after any brief disruption
    stop_s: float  # after a node froze or stalled past the session timeout
    session_timeout_s: float
    heartbeat_ttl_s: float = DEFAULT_HEARTBEAT_TTL_S

    @property
    def stall_s(self) -> float:
        """After a node's Postgres traffic stalled: its peers end its session, else its
        session timeout does (the stop bound)."""
        return min(self.stop_s, self.kill_s + STALL_NOTICE_S)


@dataclass(frozen=True)
class Fault:
    kind: str
    at_s: float  # offset from the start of the fault phase
    hold_s: float  # pause, stall, cut or downtime; for kills, the delay before the restart
    targets: tuple[str, ...]  # node ids; empty for server faults
    label: str  # the target as shown: a node id, a zone, "postgres", "redis"
    bound_s: float
    mode: str = ""  # pg-restart: fast | immediate

    @property
    def span_s(self) -> float:
        extra = 2.0 if self.kind == "pg-restart" else REJOIN_S.get(self.kind, 0.0)
        return self.hold_s + SETTLE_S + extra


def parse_kinds(
    text: str, *, external: bool, pg_ha: bool = False, pg_async: bool = False
) -> tuple[str, ...]:
    """The comma list of ``--faults`` (``all`` for every kind that applies); restarts and
    failovers need own servers, ``pg-failover`` needs ``--pg-ha``."""
    if pg_async and not pg_ha:
        raise InvalidInput("pg-async", "applies to the formation of --pg-ha only")
    if pg_ha and external:
        raise InvalidInput("pg-ha", "starts its own Postgres formation; it excludes --external")
    wanted = [k.strip() for k in text.split(",") if k.strip()]
    if wanted in ([], ["all"]):
        if not pg_ha:
            return tuple(
                k for k in KINDS if k not in HA_KINDS and not (external and k in RESTART_KINDS)
            )
        return tuple(k for k in KINDS if k not in SINGLE_PG_KINDS | SINGLE_REDIS_KINDS)
    for kind in wanted:
        if kind not in KINDS:
            raise InvalidInput("faults", f"unknown fault {kind!r}; choose from {', '.join(KINDS)}")
        if external and kind in RESTART_KINDS:
            raise InvalidInput("faults", f"{kind} needs the harness's own servers (no --external)")
        if kind == "pg-failover" and not pg_ha:
            raise InvalidInput("faults", "pg-failover needs --pg-ha (a pg_auto_failover formation)")
        if pg_ha and kind in SINGLE_PG_KINDS:
            raise InvalidInput("faults", f"{kind} needs a single Postgres server (no --pg-ha)")
        if "redis-failover" in wanted and kind in SINGLE_REDIS_KINDS:
            raise InvalidInput("faults", f"{kind} needs a single Redis server (no redis-failover)")
    return tuple(dict.fromkeys(wanted))


def _fault(
    kind: str, at_s: float, rng: random.Random, nodes: dict[str, str], bounds: Bounds
) -> Fault:
    timeout = bounds.session_timeout_s
    target = rng.choice(sorted(nodes))
    if kind == "zone-kill":
        zone = rng.choice(sorted(set(nodes.values())))
        members = tuple(n for n, z in sorted(nodes.items()) if z == zone)
        return Fault(kind, at_s, rng.uniform(3.0, 8.0), members, zone, bounds.kill_s)
    if kind == "sigkill":
        return Fault(kind, at_s, rng.uniform(1.0, 8.0), (target,), target, bounds.kill_s)
    if kind in ("sigstop", "pg-stall"):
        hold = timeout * rng.uniform(1.3, 1.8)
        bound = bounds.stop_s if kind == "sigstop" else bounds.stall_s
        return Fault(kind, at_s, hold, (target,), target, bound)
    if kind == "sigstop-short":
        hold = timeout * rng.uniform(0.3, 0.6)
        return Fault(kind, at_s, hold, (target,), target, hold + bounds.kill_s)
    if kind == "redis-cut":
        return Fault(kind, at_s, rng.uniform(6.0, 10.0), (target,), target, bounds.kill_s)
    if kind == "pg-blip":
        return Fault(kind, at_s, BLIP_S, (target,), target, BLIP_S + bounds.kill_s)
    if kind == "pg-terminate":
        return Fault(kind, at_s, 0.0, (target,), target, bounds.kill_s)
    if kind == "redis-restart":
        return Fault(kind, at_s, rng.uniform(1.0, 4.0), (), "redis", bounds.kill_s)
    if kind == "pg-failover":
        # The primary's host is killed; it comes back as a standby after the hold. The
        # bound is the promotion time measured during the run + the kill bound.
        return Fault(kind, at_s, rng.uniform(2.0, 4.0), (), "postgres", bounds.kill_s)
    if kind == "redis-failover":
        # Firing never waits on Redis; the bound is how soon membership settles on the
        # new primary: the heartbeat TTL + the kill bound.
        bound = bounds.heartbeat_ttl_s + bounds.kill_s
        return Fault(kind, at_s, rng.uniform(1.0, 3.0), (), "redis", bound)
    if kind == "poison-job":
        # Whichever nodes run it die, one after another: each attempt is a kill.
        bound = (poison.RETRIES + 1) * bounds.kill_s
        return Fault(kind, at_s, poison.HOLD_S, (), poison.JOB, bound)
    hold = rng.uniform(1.0, 4.0)
    mode = rng.choice(("fast", "immediate"))
    return Fault(kind, at_s, hold, (), "postgres", hold + bounds.kill_s, mode)


def make_plan(
    kinds: tuple[str, ...],
    nodes: dict[str, str],
    duration_s: float,
    seed: int,
    bounds: Bounds,
) -> list[Fault]:
    """Faults for ``nodes`` (node id -> zone) within ``duration_s``; the same for one seed."""
    if len(nodes) < 2 and kinds:
        raise InvalidInput("nodes", "faults need at least 2 nodes (one must stay healthy)")
    if "zone-kill" in kinds and len(set(nodes.values())) < 2:
        raise InvalidInput("zones", "zone-kill needs at least 2 zones")
    rng = random.Random(f"faults:{seed}")
    plan: list[Fault] = []
    at = START_S
    while kinds:
        order = list(kinds)
        rng.shuffle(order)
        for kind in order:
            fault = _fault(kind, at, rng, nodes, bounds)
            end = fault.at_s + fault.span_s
            if end > duration_s - TAIL_S and len(plan) >= len(kinds):
                return plan
            plan.append(fault)
            at = end + rng.uniform(*GAP_S)
        if len(plan) == len(kinds) and plan[-1].at_s + plan[-1].span_s > duration_s - TAIL_S:
            need = plan[-1].at_s + plan[-1].span_s + TAIL_S
            raise InvalidInput(
                "duration", f"{duration_s:g}s is too short for these faults (needs {need:.0f}s)"
            )
    return plan
