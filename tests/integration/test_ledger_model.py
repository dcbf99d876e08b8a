"""A model-based test of operator actions: hypothesis's rule-based state machine drives a
few jobs (a plain one, one gated on it, one chained after it, one with two schedules, a
watch job, an each-zone job whose child in the node's zone the node's each-zone keeper
makes, which an apply may make an ordinary job and an each-zone one again, an every-node
job, a job whose slots run as flights, two jobs sharing a named limit) through random
sequences of what operators do (apply, an apply that pauses, pause, pause --until, resume,
skip-next, triggers with a payload or a past slot, windows that skip or defer and their
removal, a holiday put in and taken out of the calendar of a and m, backfills and their
cancels, rollbacks, removals, failures, pings and cancels, the watch job's adoption and new
timings, the key's and the tenant's limits) and of nodes
dying with runs in progress, against a real database with an explicit clock. After every
step the clock moves on, a node's pass claims and completes what is due with the node's own
claim and completion statements (and runs recovery, the gate pass, the backfiller and the
late pass), and the slot ledger is checked (tests/helpers/ledger.py): every expected slot
recorded, no terminal record overwritten, no wait without a bound, no slot run while its
job was paused, no skip left ahead by a window removed or a holiday taken out since; then
``pulse audit``'s reading of the same rows must find nothing missing or overwritten, and no
record the job's timing made on a slot it never had. Retries, catch-up policies, stalls (no
pass before the next action, so it meets due slots) and runs that outlive their pass (the
next action meets them running) are drawn too.

Each example is a tenant of its own in one schema, on a clock that only moves forward
(statements that read the database's own clock then see the model's past). The fast tier
runs a fixed, derandomized budget; ``slow`` runs a longer one in the full suite. Sequences
it found broken are plain regression tests below the machine, none of them ``xfail``, and
no action is left out of it any more: windows over the job's next slot, over a slot held
at its gate or while another window is ahead, pauses, resumes and new schedules while a
window is ahead, new schedules and rollbacks while slots are overdue after an outage, and
triggers after skip-next are all drawn.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import Callable, Collection, Coroutine
from contextlib import aclosing
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, TypeVar

import hypothesis
import pytest
from hypothesis import HealthCheck
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from cluster.errors import PulseError
from cluster.jobs.ledger import FAILING, Line
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.housekeeping import backfills
from cluster.store.housekeeping.alerts import AlertStore
from cluster.store.jobstore.store import JobStore
from cluster.store.lock.records import ClaimedJob, Completion, Skip
from cluster.store.lock.session import LockSession
from cluster.store.observe.audit import Scope, audit_lines
from cluster.store.side import SideConnection
from cluster.timing.calendars import Calendar
from cluster.timing.schedule import parse_schedule
from node.handlers.context import Outcome
from node.maintenance.recovery import lost_error, poisoned
from node.membership.eachzone import ZoneChildren
from node.pipeline.completer import SPAWNED
from node.pipeline.outcomes import after_run, gate_skip, plan_at_claim
from node.state import NodeState
from ring.zones import space_shards
from tests.helpers.ledger import Ledger, Timeline, left_queued, open_waits, unexpected

T = TypeVar("T")
HANDLER = "cluster.chaos.witness:record"
SHARDS = list(range(16))
MINUTE = timedelta(minutes=1)
LEASE_S = 180.0  # a run whose node died is taken back this long after it was claimed
OK = Outcome("succeeded", None, 0.01)
FAILED = Outcome("failed", "boom", 0.01)
RUNNERS = ("a", "b", "m")  # jobs on a clock that operators pause, skip, trigger
# and an each-zone job, whose child in zone z runs its slots, an every-node job, whose
# slot runs on each live node (the model's one) and is recorded once, and a job whose slots
# run as flights (overlap allow), one at a time
FLOWN = ("n", "o")
# and two jobs that use the tenant's named limit KEY (one run at a time, or two): a run of one
# that outlives its pass holds the other's slot waiting for the key
KEYED = ("k", "l")
KEY = "seats"
HELD = (*RUNNERS, "e", *FLOWN, *KEYED)
QUIETED = (*HELD, "w")  # and the watch job: pauses and skip-next reach it too
ZONE = "z"  # the zone of the model's node
CHILD = {"e": f"e@{ZONE}"}  # the job whose slots an operator's action on e decides
SCHEDULES = {
    "a": "@every 1m",
    "m": ["*/2 * * * *", "*/3 * * * *"],
    "e": "@every 1m",
    "n": "@every 1m",
    "o": "@every 1m",
    "k": "@every 1m",
    "l": "@every 1m",
}
EXCLUDED = {"a": "skip", "m": "next-business-day"}  # what their calendar's holiday does
NO_CALENDAR = {"calendar": None}


def spec(name: str, tenant: str, schedule: Any = None, **kw: Any) -> JobSpec:
    """A job of the model: ``kw`` are job-file keys (``retries``, ``catch_up``)."""
    if name == "b":
        return JobSpec.build(
            "b", "@every 1m", HANDLER, tenant=tenant, after=["a"], after_timeout="5m", **kw
        )
    if name == "c":
        return JobSpec.build("c", "@after:a", HANDLER, tenant=tenant, **kw)
    if name == "w":
        watch = {"watch": True, "late_after": "20s", **kw}  # watch False: once adopted
        return JobSpec.build("w", schedule or "* * * * *", HANDLER, tenant=tenant,
                             timeout="3m", **watch)  # fmt: skip
    if name in FLOWN:
        flown = {"each_node": True} if name == "n" else {"overlap": "allow", "max_concurrent": 1}
        return JobSpec.build(name, schedule or SCHEDULES[name], HANDLER, tenant=tenant,
                             **flown, **kw)  # fmt: skip
    if name == "e":  # an each-zone job, unless kw says otherwise
        return JobSpec.build("e", schedule or SCHEDULES["e"], HANDLER, tenant=tenant,
                             **{"each_zone": True, **kw})  # fmt: skip
    if name in EXCLUDED and kw.get("calendar", True) is not None:  # None: without it
        kw = {"calendar": f"cal-{tenant}", "on_excluded": EXCLUDED[name], **kw}
    return JobSpec.build(name, schedule or SCHEDULES[name], HANDLER, tenant=tenant, **kw)


class Cluster:
    """One schema, a store, a node's lock session and side connections, on a loop of its
    own (hypothesis runs the machine's rules synchronously)."""

    def __init__(self, cluster: ClusterSettings) -> None:
        self.settings = cluster
        self.runner = asyncio.Runner()
        self.store: JobStore = self.run(self._open_store())
        self.node = LockSession(
            cluster, "model", ZONE, session_timeout_s=30, statement_timeout_s=10
        )
        self.run(self.node.open())
        # The each-zone keeper of the node's zone, and the shards it claims: the default
        # ones and those of its zone's space, where e's child lives.
        self.keeper = ZoneChildren(NodeState("model", ZONE, len(SHARDS)), self.node)
        space = self.run(self.node.zones.zone_space([ZONE]))
        self.shards = [*SHARDS, *space_shards(space)]
        self.side = SideConnection(cluster, "model/backfill", statement_timeout_s=10)
        self.alerts = AlertStore(SideConnection(cluster, "model/late", statement_timeout_s=10))
        midnight = datetime.now(UTC).replace(hour=0, minute=0, second=30, microsecond=0)
        self.clock = midnight + timedelta(days=2)  # ahead of the database's clock
        self.tenants = itertools.count()
        self.held: list[ClaimedJob] = []  # runs still running after their pass
        self.lost: list[ClaimedJob] = []  # runs whose node died: taken back at their lease

    async def _open_store(self) -> JobStore:
        self._stores = JobStore.open(self.settings)
        store = await self._stores.__aenter__()
        await store.init(shards=len(SHARDS))
        return store

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        return self.runner.run(work)

    def close(self) -> None:
        async def closing() -> None:
            await self.node.close()
            await self.side.close()
            await self.alerts.close()
            await self._stores.__aexit__(None, None, None)

        self.run(closing())
        self.runner.close()

    async def tick(self, failing: Counter[str], hold: Collection[str] = ()) -> None:
        """A node's pass at the clock: the runs held since the last pass end, recovery, the
        keeper, the late pass over watch jobs (which hands an adopted one over), then gates,
        backfills, claims and completions until nothing is due (a completion releases
        downstreams). The first run claimed in this
        pass of a job named in ``hold`` is still running after it, until the next pass."""
        now = self.clock
        if self.held:
            ids = [job.id for job in self.held]  # a cancel asked meanwhile stops the run
            asked = "SELECT id, cancel_by FROM jobs WHERE id = ANY(%s)"
            rows = await (await self.store.db.conn.execute(asked, (ids,))).fetchall()
            cancels = {row["id"]: row["cancel_by"] for row in rows}
            leases = [(f.id, f.slot, f.lease_token) for f in self.held if f.flight]
            renewed = await self.node.flights.renew(leases, LEASE_S, now=now)
            for (job_id, _), cancel_by in renewed.items():  # a flight's own cancel
                cancels[job_id] = cancel_by
            held = [_ran(job, now, failing, cancels.get(job.id)) for job in self.held]
            flown = {job.id for job in self.held if job.flight}
            self.held = []
            await self.node.completions.complete(
                [done for done, _ in held if done.id not in flown],
                [s for _, skips in held for s in skips],
                now=now,
            )
            ended = [done for done, _ in held if done.id in flown]
            await self.node.completions.complete_flights(ended, now=now)
        await self.recover(now)
        await self.keeper.run_once(now)
        await self.alerts.watch_pass(len(SHARDS), now=now)  # hands an adopted job over
        await self.alerts.watch_timeouts(now=now)
        for _ in range(500):  # a tenant's limit of one lets one run in a claim
            await self.store.db.all("gate_pass", {"shards": self.shards})
            await backfills.fill(self.side, self.shards, now)
            jobs = (await self.node.claim(self.shards, 100, LEASE_S, now=now)).jobs
            flights = await self.node.flights.claim(self.shards, 100, LEASE_S, now=now)
            if not jobs and not flights:
                break
            gated = [(j.id, j.slot) for j in [*jobs, *flights] if j.gated and j.attempt == 1]
            verdicts = await self.node.gate_verdicts(gated) if gated else {}
            done, skips = [], []
            for job in jobs:
                verdict = verdicts.get((job.id, job.slot))
                flown = job.each_node or job.overlap == "allow"
                if flown and _runs(job, now, verdict):  # handed over, as a node does
                    flights += await self.fan_out(job, now)
                    continue
                if job.name in hold and not self.held and _runs(job, now, verdict):
                    self.held.append(job)
                    continue
                finished, skipped = _finish(job, now, failing, verdict)
                done.append(finished)
                skips += skipped
            await self.node.completions.complete(done, skips, now=now)
            ended = []
            for f in flights:
                verdict = verdicts.get((f.id, f.slot))
                if f.name in hold and not self.held and _runs(f, now, verdict):
                    self.held.append(f)  # an every-node or allow job's run: a flight
                    continue
                ended.append(_finish(f, now, failing, verdict)[0])
            await self.node.completions.complete_flights(ended, now=now)

    async def shut_down(self, now: datetime) -> None:
        """The node running the runs held past their pass shuts down before they end
        (node/shutdown.py): it hands them back for another attempt, due at once (an
        every-node run to its own queue), then records its every-node runs not ended
        missed. The model's node goes on as the node that takes them."""
        held, self.held = self.held, []
        reason = "node shut down before the run ended"
        await self.node.release(
            [(j.id, j.lease_token) for j in held if not j.flight], reason, now=now
        )
        flights = [(j.id, j.slot, j.lease_token) for j in held if j.flight]
        await self.node.flights.release(flights, reason, now=now)
        await self.node.flights.drain(now=now)

    async def recover(self, now: datetime) -> None:
        """The node's recovery pass (node/maintenance/recovery.py): the runs of a dead node
        are taken back once their lease has expired, due again as their next attempt, or,
        their retries spent (poison), recorded failed, or cancelled if an operator asked."""
        done, skips = [], []
        for row in await self.node.recover(self.shards, ["model"], now=now, lease_s=LEASE_S):
            if row["poison"]:
                finished, skipped = after_run(poisoned(row), _lost(row["cancel_by"], row), now)
                done.append(finished)
                skips += skipped
        await self.node.completions.complete(done, skips, now=now)
        flights = await self.node.flights.recover(self.shards, ["model"], now=now, lease_s=LEASE_S)
        ended = [after_run(f.job, _lost(f.job.cancel_by), now)[0] for f in flights if f.poison]
        await self.node.completions.complete_flights(ended, now=now)
        running = (
            "SELECT id, lease_token FROM jobs WHERE status = 'running' UNION ALL"
            " SELECT job_id, lease_token FROM flights WHERE status = 'running' UNION ALL"
            " SELECT job_id, lease_token FROM node_runs WHERE status = 'running'"
        )
        rows = await (await self.store.db.conn.execute(running)).fetchall()
        leases = {(row["id"], row["lease_token"]) for row in rows}
        self.lost = [job for job in self.lost if (job.id, job.lease_token) in leases]

    async def fan_out(self, job: ClaimedJob, now: datetime) -> list[ClaimedJob]:
        """An every-node job's claimed slot handed to its members' runs, or an overlap
        ``allow`` job's to a flight (``spawn``, as the node's completer does): the model's
        node is the one member; the run that starts here, if one has room."""
        spawned, skips = after_run(job, OK, now)
        moved = await self.node.completions.spawn(
            [spawned._replace(outcome=SPAWNED)], skips, LEASE_S, now=now, members=[("model", ZONE)]
        )
        return [job._replace(flight=True)] if moved.get(job.id) else []

    async def rows(self, tenant: str) -> tuple[dict[str, Any], list[Any], list[Any], list[Any]]:
        conn = self.store.db.conn  # the rows as they are, read as an observer would

        async def read(statement: str) -> list[Any]:
            params = (tenant,) * statement.count("%s")
            return await (await conn.execute(statement, params)).fetchall()

        jobs = await read("SELECT * FROM jobs WHERE tenant_id = %s")
        runs = await read("SELECT * FROM runs WHERE tenant_id = %s")
        queued = await read(
            "SELECT c.* FROM chain_slots c JOIN jobs j ON j.id = c.job_id WHERE j.tenant_id = %s"
        )
        flights = await read(  # an every-node slot's runs are its members' (node_runs)
            "SELECT f.job_id, f.slot, f.attempt, f.status, f.due_at FROM flights f"
            " JOIN jobs j ON j.id = f.job_id WHERE j.tenant_id = %s"
            " UNION ALL SELECT n.job_id, n.slot, n.attempt, n.status, n.due_at"
            " FROM node_runs n JOIN jobs j ON j.id = n.job_id WHERE j.tenant_id = %s"
        )
        return {j["name"]: j for j in jobs}, runs, queued, flights

    async def stamp(self, tenant: str) -> None:
        """Revisions are stamped with the database's clock, days behind the model's: those
        just written (by an operator, or by a completion that paused a job) take the
        model's time, as the audit reads when a definition held; so do the jobs just made
        (an each-zone job's child is judged from when it was made)."""
        for table, column in (("job_revisions", "at"), ("jobs", "created_at")):
            await self.store.db.conn.execute(
                f"UPDATE {table} SET {column} = %s"
                f" WHERE tenant_id = %s AND {column} <= clock_timestamp()",
                (self.clock, tenant),
            )

    async def audit(self, tenant: str, start: datetime, end: datetime | None = None) -> list[Line]:
        """``pulse audit`` of the tenant from ``start`` to ``end`` (the clock): every line."""
        scope = Scope(start, end or self.clock, tenant=tenant, now=self.clock)
        async with aclosing(audit_lines(self.store.db.conn, scope)) as lines:
            return [line async for line in lines]

    async def rate_spent(self, key: str, tenant: str) -> bool:
        """Whether the tenant's key has a rate whose tokens the starts of the last period
        (up to the clock) have all taken."""
        statement = (
            "SELECT rate, (SELECT count(*) FROM unnest(starts) AS s"
            "              WHERE s > %s - make_interval(secs => per_s)) AS used"
            " FROM limit_keys WHERE scope = %s AND name = %s AND rate IS NOT NULL"
        )
        cur = await self.store.db.conn.execute(statement, (self.clock, tenant, key))
        row = await cur.fetchone()
        return row is not None and row["used"] >= row["rate"]

    async def waits(self, tenant: str) -> list[Any]:
        """The tenant's waits for named limits still open, with their job's name."""
        statement = (
            "SELECT j.name, w.slot, w.key_name FROM limit_waits w JOIN jobs j ON j.id = w.job_id"
            " WHERE j.tenant_id = %s AND w.ended IS NULL"
        )
        return await (await self.store.db.conn.execute(statement, (tenant,))).fetchall()

    async def forget(self, tenant: str) -> None:
        await self.store.db.conn.execute("DELETE FROM jobs WHERE tenant_id = %s", (tenant,))
        await self.store.calendars.remove(f"cal-{tenant}")
        await self.store.limits.remove(KEY, tenant)


class OperatorActions(RuleBasedStateMachine):
    cluster: ClassVar[Cluster]

    def __init__(self) -> None:
        super().__init__()
        self.tenant = f"m{next(self.cluster.tenants)}"
        self.timelines: dict[str, Timeline] = {}
        self.ledger = Ledger()
        self.failing: Counter[str] = Counter()  # runs of a job still to fail
        self.token = ""
        self.options: dict[str, Any] = {}  # a's and m's job-file keys (retries, catch-up)
        self.first_options: dict[str, Any] = {}  # a's revision 1
        self.started = self.now
        self.pause_after: int | None = None
        self.after_failure = "block"
        self.stalled = False  # no pass until the next step is taken
        self.windows: list[int] = []  # the ids of the windows added, oldest first
        # Each window removed and holiday taken out: when, its skips' reason, the jobs moved.
        self.withdrawals: list[tuple[datetime, str, set[str]]] = []
        self.a_calendar = True  # a's definition names the calendar
        self.hold: tuple[str, ...] = ()  # jobs whose next run to start outlives its pass
        self.each_zone = True  # e is an each-zone job (else an ordinary one)
        self.keyed = dict.fromkeys(KEYED, True)  # k and l use the key
        self.seats = 1  # the key's limits: runs at once, and starts a minute
        self.rate: str | None = None
        self.c_max_runs: int | None = None  # the chained job's max_runs
        self.backfills: list[int] = []  # the ids of the backfills asked, oldest first
        self.steps: list[str] = []

    # -- the model's clock and the node's pass -------------------------------------------

    @property
    def now(self) -> datetime:
        return self.cluster.clock

    def do(self, what: str, work: Callable[[], Coroutine[Any, Any, Any]]) -> bool:
        """An operator's action; False if refused (one line, nothing written)."""
        self.steps.append(what)
        try:
            self.cluster.run(work())
        except PulseError:
            self.steps[-1] += " (refused)"
            return False
        self.cluster.run(self.cluster.stamp(self.tenant))
        return True

    def runs_as(self, name: str) -> str:
        """The job that runs the slots an action on ``name`` decides: e's child in zone z
        while e is an each-zone job, e itself while it is an ordinary one."""
        if name in ("e", CHILD["e"]):
            return CHILD["e"] if self.each_zone else "e"
        return name

    def quiet(self, name: str) -> bool:
        """Whether the job is paused, or paused until a time still to come."""
        line = self.timelines[self.runs_as(name)]
        return bool(line.quiet) and (line.quiet[-1][1] is None or line.quiet[-1][1] > self.now)

    def timeline(self, name: str) -> Timeline:
        """The model of a job made now: its schedule from now on, or its upstream."""
        line = Timeline(self.now)
        if name == "c":
            line.upstreams = ("a",)
        else:
            name = {child: parent for parent, child in CHILD.items()}.get(name, name)
            text = SCHEDULES.get(name, "@every 1m" if name == "b" else "* * * * *")
            line.schedules.append((self.now, _schedule(text)))
        return line

    @initialize(
        retries=st.integers(0, 1),
        catch_up=st.sampled_from(("once", "skip", "backfill")),
        pause_after=st.sampled_from((None, 2)),
        max_runs=st.sampled_from((None, 3)),
        after_failure=st.sampled_from(("block", "run", "skip")),
    )
    def make_jobs(
        self,
        retries: int = 0,
        catch_up: str = "once",
        pause_after: int | None = None,
        max_runs: int | None = None,
        after_failure: str = "block",
    ) -> None:
        """The jobs; a, m, k and l retry a failed slot (after 30 s) or not, and catch up by
        a policy of their own; m may pause itself after failed slots in a row; b does what
        its ``after_failure`` says when a's slot failed."""
        self.options = {"retries": retries, "retry_backoff": "30s", "catch_up": catch_up}
        self.pause_after = pause_after
        self.max_runs = self.first_max_runs = max_runs
        self.after_failure = after_failure
        self.first_options = self.options
        self.started = self.now
        self.do(f"calendar cal-{self.tenant}", lambda: self.put_calendar(holiday=False))
        self.do(
            f"limits set {KEY} --max-concurrent 1",
            lambda: self.cluster.store.limits.set(KEY, tenant=self.tenant, max_concurrent=1),
        )
        names = ("a", "b", "c", "m", "w", "e", *FLOWN, *KEYED)
        specs = [spec(n, self.tenant, **self.kept(n)) for n in names]
        self.do(
            f"apply a b c m w e n o k l (retries {retries}, catch-up {catch_up}, "
            f"m's pause after failures {pause_after} and max runs {max_runs}, "
            f"b's after-failure {after_failure})",
            lambda: self.cluster.store.definitions.apply(specs, now=self.now),
        )
        self.make_child()
        self.timelines = {
            n: self.timeline(n) for n in ("a", "b", "c", "m", "w", CHILD["e"], *FLOWN, *KEYED)
        }
        self.token = self.cluster.run(self.cluster.store.watch.token("w", self.tenant)) or ""

    def make_child(self) -> None:
        """The keeper makes e's child in zone z now, as it would in a node's pass."""
        self.cluster.run(self.cluster.keeper.run_once(self.now))
        self.cluster.run(self.cluster.stamp(self.tenant))

    def kept(self, name: str) -> dict[str, Any]:
        """The options the model gave the job, which a new definition keeps."""
        if name == "m":
            done = {} if self.max_runs is None else {"max_runs": self.max_runs}
            return {**self.options, "pause_after_failures": self.pause_after, **done}
        if name == "b":
            return {"after_failure": self.after_failure}
        if name == "c":
            return {} if self.c_max_runs is None else {"max_runs": self.c_max_runs}
        if name == "e":
            return {**self.options, "each_zone": self.each_zone}
        if name in KEYED:  # a slot let in late by its key runs, whatever its catch-up
            return {**self.options, **({"uses": KEY} if self.keyed[name] else {})}
        return self.options if name == "a" else {}

    def tick(self) -> None:
        """A node's pass at the clock. m pauses itself after failed slots in a row: its
        slots from then on are not expected, as after an operator's pause."""
        self.cluster.run(self.cluster.tick(self.failing, self.hold))
        self.hold = ()
        self.cluster.run(self.cluster.stamp(self.tenant))
        self.note_done()
        if self.pause_after is not None and not self.quiet("m"):
            job = self.cluster.run(self.cluster.store.get("m", self.tenant))
            if job.paused:
                self.steps.append("m paused itself")
                self.timelines["m"].quiet.append([self.now, None])

    def note_done(self) -> None:
        """m or c done after its max_runs: m's slots from the one it stopped at are
        expected no more, nor c's from upstream successes since the pass that made it done,
        until a new timing or more runs make it idle again (then from now on)."""
        for name in ("m", "c"):
            line = self.timelines.get(name)
            limit = self.max_runs if name == "m" else self.c_max_runs
            if line is None or (limit is None and not line.done):
                continue
            job = self.cluster.run(self.cluster.store.get(name, self.tenant))
            ended = bool(line.done) and line.done[-1][1] is None
            if job.status == "done" and not ended:
                self.steps.append(f"{name} done")
                line.done.append([job.slot_at if name == "m" else self.now, None])
            elif job.status != "done" and ended:
                line.done[-1][1] = self.now + timedelta(microseconds=1)  # after its pass

    def teardown(self) -> None:
        """The next example starts on a day of its own at the same time of day, so a
        sequence replays with the slots it had."""
        self.cluster.held = []
        self.cluster.lost = []
        self.cluster.run(self.cluster.forget(self.tenant))
        self.cluster.clock = (self.now + timedelta(days=1)).replace(hour=0, minute=0)

    # -- time ----------------------------------------------------------------------------

    @rule(minutes=st.integers(1, 3))
    def advance(self, minutes: int) -> None:
        """Time passes with a node running: a pass every minute (and one after the step)."""
        self.steps.append(f"advance {minutes + 1}m")
        for _ in range(minutes):
            self.cluster.clock += MINUTE
            self.tick()

    @rule(name=st.sampled_from(("a", "m", "w", CHILD["e"], *FLOWN, *KEYED)))
    def run_long(self, name: str) -> None:
        """The job's run that the next pass starts is still running at the step after it,
        which meets it running; it ends in the pass after that step."""
        name = self.runs_as(name)
        self.steps.append(f"{name}'s next run runs long")
        self.hold = (name,)

    @rule()
    def key_held_long(self) -> None:
        """The run of k or l that the next pass starts first outlives it, holding the key:
        the other's slot due then waits for it, and the step after meets it waiting."""
        self.steps.append("k's or l's next run runs long")
        self.hold = KEYED

    # No precondition on the runs held: which run a pass holds can depend on the claim's
    # order among equals (a key's last token), and a rule enabled by the database's state
    # makes hypothesis's replay of a sequence draw differently (FlakyStrategyDefinition).
    @rule()
    def node_dies(self) -> None:
        """The node running the runs held past their pass dies with them (SIGKILL):
        nothing ends them, and the model's node takes them back when their lease expires,
        as a live node's recovery does. Nothing happens while none is held."""
        names = ", ".join(job.name for job in self.cluster.held) or "nothing"
        self.steps.append(f"the node running {names} dies")
        self.cluster.lost += self.cluster.held
        self.cluster.held = []

    @rule()
    def node_shuts_down(self) -> None:
        """The node running the runs held past their pass is stopped (SIGTERM) before they
        end: they are due again at once, and its every-node runs are recorded missed.
        Nothing happens while none is held."""
        names = ", ".join(job.name for job in self.cluster.held) or "nothing"
        self.steps.append(f"the node running {names} shuts down")
        if self.cluster.held:
            self.cluster.run(self.cluster.shut_down(self.now))

    @rule(name=st.sampled_from(("a", "m", "e", CHILD["e"], *FLOWN, *KEYED)))
    def cancel_run(self, name: str) -> None:
        """``pulse runs cancel``: the job's run in progress stops, recorded cancelled;
        refused when none runs. That of an each-zone job stops its child's."""
        if name == CHILD["e"]:
            name = self.runs_as(name)
        self.do(
            f"runs cancel {name}",
            lambda: self.cluster.store.runcontrol.cancel(name, self.tenant, by="model"),
        )

    @rule(minutes=st.integers(2, 10))
    def outage(self, minutes: int) -> None:
        """No node runs for a while, then one pass: catch-up decides the missed slots."""
        self.steps.append(f"outage {minutes}m, then a minute")
        self.cluster.clock += minutes * MINUTE
        self.tick()

    @rule(minutes=st.integers(1, 5))
    def stall(self, minutes: int) -> None:
        """No node runs for a while, and the next step comes before one does: a pause, a
        skip-next, a window or a trigger meets slots that are due and not yet claimed."""
        self.steps.append(f"no pass for {minutes}m")
        self.cluster.clock += minutes * MINUTE
        self.stalled = True

    # -- operator actions ----------------------------------------------------------------

    @rule(name=st.sampled_from(QUIETED))
    def pause(self, name: str) -> None:
        if self.do(
            f"pause {name}", lambda: self.cluster.store.pause(name, self.tenant, now=self.now)
        ):
            line = self.timelines[self.runs_as(name)]
            if self.quiet(name):
                line.quiet[-1][1] = None
            else:
                line.quiet.append([self.now, None])

    @rule(name=st.sampled_from(QUIETED), minutes=st.integers(1, 8))
    def pause_until(self, name: str, minutes: int) -> None:
        until = self.now + minutes * MINUTE - timedelta(seconds=30)
        if self.do(
            f"pause {name} --until +{minutes}m",
            lambda: self.cluster.store.holds.pause_until(name, self.tenant, until, now=self.now),
        ):
            line = self.timelines[self.runs_as(name)]
            if self.quiet(name):
                line.quiet[-1][1] = until
            else:
                line.quiet.append([self.now, until])

    @rule(name=st.sampled_from(QUIETED))
    def resume(self, name: str) -> None:
        if self.do(
            f"resume {name}", lambda: self.cluster.store.resume(name, self.tenant, now=self.now)
        ) and self.quiet(name):
            self.timelines[self.runs_as(name)].quiet[-1][1] = self.now

    @rule(name=st.sampled_from(QUIETED), count=st.integers(1, 3))
    def skip_next(self, name: str, count: int) -> None:
        self.do(
            f"skip-next {name} --count {count}",
            lambda: self.cluster.store.holds.skip_next(name, self.tenant, count, now=self.now),
        )

    @rule(name=st.sampled_from((*QUIETED, "c")))
    def trigger(self, name: str) -> None:
        self.do(
            f"trigger {name}", lambda: self.cluster.store.trigger(name, self.tenant, now=self.now)
        )

    @rule(name=st.sampled_from(("a", "m", "k")))
    def trigger_with_payload(self, name: str) -> None:
        self.do(
            f"trigger {name} --payload",
            lambda: self.cluster.store.inputs.trigger(
                name, self.tenant, payload={"x": 1}, now=self.now
            ),
        )

    @rule(name=st.sampled_from(("a", "m")), back=st.integers(1, 6))
    def trigger_slot(self, name: str, back: int) -> None:
        slot = (self.now - back * MINUTE).replace(second=0)
        if self.do(
            f"trigger {name} --slot -{back}m",
            lambda: self.cluster.store.inputs.trigger(name, self.tenant, slot=slot, now=self.now),
        ):
            self.ask_again(name, [slot])

    def ask_again(self, name: str, slots: list[datetime]) -> None:
        """An operator asked for these slots to run again: each may rewrite its record once."""
        job = self.cluster.run(self.cluster.store.get(name, self.tenant))
        self.ledger.ask(job.id, slots)

    @rule(
        name=st.sampled_from(RUNNERS),  # b's over a slot held at its gate too
        # From before the job's next slot (a window over it) to a few minutes on:
        start=st.integers(0, 5),
        length=st.integers(1, 4),
        defer=st.booleans(),
    )
    def window(self, name: str, start: int, length: int, defer: bool) -> None:
        begin = self.now + start * MINUTE - timedelta(seconds=30)
        end = begin + length * MINUTE

        async def add() -> None:
            store = self.cluster.store
            change = await store.windows.add(
                begin, end, job=name, tenant=self.tenant, defer=defer, now=self.now
            )
            self.windows.append(change.window.id)

        self.do(f"window {name} +{start}m {length}m{' defer' if defer else ''}", add)

    @precondition(lambda self: bool(self.windows))
    @rule()
    def remove_window(self) -> None:
        """The last window added is called off, before, while or after it holds."""
        window = self.windows.pop()
        moved = self.moved()
        if self.do(
            f"windows remove {window}",
            lambda: self.cluster.store.windows.remove(window, now=self.now),
        ):
            self.withdrawals.append((self.now, f"blackout window {window} (", moved))

    async def put_calendar(self, *, holiday: bool) -> None:
        excluded = {self.now.date()} if holiday else set()
        calendar = Calendar(f"cal-{self.tenant}", frozenset(range(7)), frozenset(excluded))
        await self.cluster.store.calendars.put(calendar, now=self.now)

    @rule(holiday=st.booleans())
    def calendar(self, holiday: bool) -> None:
        """a's and m's calendar excludes today (a skips its slots, m moves them to
        tomorrow), or no longer does."""
        moved = self.moved()
        if (
            self.do(
                f"calendar {'with' if holiday else 'without'} today",
                lambda: self.put_calendar(holiday=holiday),
            )
            and not holiday
        ):
            self.withdrawals.append((self.now, f"calendar cal-{self.tenant}: ", moved))

    def moved(self) -> set[str]:
        """The jobs a calendar or window change plans again now (replan_calendar_job), or
        that are paused: the change takes back the skips their old rule recorded ahead; and
        those running, whose completion records none of them after the change."""
        jobs, *_ = self.cluster.run(self.cluster.rows(self.tenant))
        return {name for name, job in jobs.items() if _moved(job)}

    def stale(self, runs: list[Any]) -> list[str]:
        """Skips recorded ahead by a window removed, or a holiday taken out, since, of slots
        that came after the change, left on a job it planned again; or naming a removed
        window at all, on a slot after its removal (a run that spanned the removal
        completed after it)."""
        return [
            f"{r['job_name']}: slot {r['scheduled_for'].isoformat()} skipped as "
            f"'{r['last_error']}', a rule taken back at {at.isoformat()}"
            for at, reason, moved in self.withdrawals
            for r in runs
            if r["status"] == "skipped"
            and r["job_name"] in moved
            and (r["last_error"] or "").startswith(reason)
            and at < r["scheduled_for"]
            and (r["finished_at"] <= at or reason.startswith("blackout window "))
        ]

    @rule(name=st.sampled_from(("a", "m")), back=st.integers(2, 8), span=st.integers(1, 6))
    def backfill(self, name: str, back: int, span: int) -> None:
        start = (self.now - back * MINUTE).replace(second=0)
        asked: list[datetime] = []

        async def backfill() -> None:
            store = self.cluster.store
            end = start + span * MINUTE
            plan = await store.runcontrol.backfill(
                name, self.tenant, start=start, end=end, now=self.now
            )
            asked.extend(plan.slots)
            if plan.backfill is not None:
                self.backfills.append(plan.backfill.id)

        if self.do(f"backfill {name} -{back}m +{span}m", backfill):
            self.ask_again(name, asked)

    @precondition(lambda self: bool(self.backfills))
    @rule()
    def cancel_backfill(self) -> None:
        """``pulse backfills cancel`` of the newest backfill: its queued slots are dropped
        (their records stay as they were), a slot of it running finishes."""
        backfill = self.backfills.pop()
        self.do(
            f"backfills cancel {backfill}",
            lambda: self.cluster.store.runcontrol.cancel_backfill(backfill),
        )

    @rule(
        every=st.sampled_from(("@every 1m", "@every 2m")),
        retries=st.integers(0, 1),
        calendar=st.booleans(),
        catch_up=st.sampled_from((None, "once", "skip", "backfill")),
    )
    def apply_a(
        self,
        every: str,
        retries: int | None = None,
        calendar: bool | None = None,
        catch_up: str | None = None,
    ) -> None:
        """A new definition of a: a timing, retries (while a slot may wait for one), with
        its calendar or without (its holiday's skips ahead then taken back), another
        catch-up policy (while slots are overdue after an outage); None: as is."""
        if retries is not None:
            self.options = {**self.options, "retries": retries}
        if catch_up is not None:
            self.options = {**self.options, "catch_up": catch_up}
        if calendar is not None:
            self.a_calendar = calendar
        without = {} if self.a_calendar else NO_CALENDAR
        new = spec("a", self.tenant, every, **self.options, **without)
        if self.do(
            f"apply a {every} (retries {self.options['retries']}, "
            f"catch-up {self.options['catch_up']}"
            f"{'' if self.a_calendar else ', no calendar'})",
            lambda: self.cluster.store.definitions.apply([new], now=self.now),
        ):
            line = self.timelines["a"]
            if str(line.schedules[-1][1].expr) != every:
                line.schedules.append((self.now, _schedule(every)))
            self.applied("a")

    def applied(self, name: str) -> None:
        """A definition of the job written over a pause: one without ``paused`` resumes it,
        and a ``pause --until`` before that holds it until its time still."""
        line = self.timelines[self.runs_as(name)]
        if name in ("m", "c"):
            self.note_done()
        if self.quiet(name) and line.quiet[-1][1] is None:
            job = self.cluster.run(self.cluster.store.get(name, self.tenant))
            if not job.paused:
                until = job.paused_until
                line.quiet[-1][1] = until if until is not None and until > self.now else self.now

    @rule(schedules=st.sampled_from((("*/2 * * * *", "*/3 * * * *"), ("*/3 * * * *",))))
    def apply_m(self, schedules: tuple[str, ...]) -> None:
        """A new timing of m, the job with several schedules and a calendar that moves an
        excluded slot to the next business day: both of its schedules, or one."""
        new = spec("m", self.tenant, list(schedules), **self.kept("m"))
        if self.do(
            f"apply m {' + '.join(schedules)}",
            lambda: self.cluster.store.definitions.apply([new], now=self.now),
        ):
            line = self.timelines["m"]
            if _schedule(list(schedules)) != line.schedules[-1][1]:
                line.schedules.append((self.now, _schedule(list(schedules))))
            self.applied("m")

    @rule(max_runs=st.sampled_from((None, 2, 4)))
    def max_runs_m(self, max_runs: int | None) -> None:
        """m's definition as it stands with another ``max_runs`` (over a pause: resumed, as
        any apply without ``paused``): raised above its runs, a done m runs again from its
        next slot; lowered to them, it is done at once."""
        every = str(self.timelines["m"].schedules[-1][1].expr)
        self.max_runs, before = max_runs, self.max_runs
        new = spec("m", self.tenant, every, **self.kept("m"))
        if self.do(
            f"apply m max runs {max_runs}",
            lambda: self.cluster.store.definitions.apply([new], now=self.now),
        ):
            self.applied("m")
        else:
            self.max_runs = before

    @rule()
    def rollback_m(self) -> None:
        """m back to its first definition: both schedules and its first ``max_runs``, which
        a rollback reads against the runs m ran as an apply does (done at once, or idle
        again)."""
        if self.do(
            "rollback m --to 1",
            lambda: self.cluster.store.revisions.rollback("m", self.tenant, 1, now=self.now),
        ):
            self.max_runs = self.first_max_runs
            line = self.timelines["m"]
            if _schedule(SCHEDULES["m"]) != line.schedules[-1][1]:
                line.schedules.append((self.now, _schedule(SCHEDULES["m"])))
            self.applied("m")

    @rule(every=st.sampled_from(("@every 1m", "@every 2m", "*/3 * * * *")))
    def apply_e(self, every: str) -> None:
        """A new timing of the each-zone job e: its child in zone z follows it."""
        new = spec("e", self.tenant, every, **self.kept("e"))
        if self.do(
            f"apply e {every}", lambda: self.cluster.store.definitions.apply([new], now=self.now)
        ):
            line = self.timelines[self.runs_as("e")]
            if _schedule(every) != line.schedules[-1][1]:
                line.schedules.append((self.now, _schedule(every)))
            self.applied("e")

    @rule(
        name=st.sampled_from(FLOWN),
        every=st.sampled_from(("@every 1m", "@every 2m", "*/3 * * * *")),
    )
    def apply_flown(self, name: str, every: str) -> None:
        """A new timing of the every-node job n, or of o, whose slots run as flights."""
        new = spec(name, self.tenant, every)
        if self.do(
            f"apply {name} {every}",
            lambda: self.cluster.store.definitions.apply([new], now=self.now),
        ):
            line = self.timelines[name]
            if _schedule(every) != line.schedules[-1][1]:
                line.schedules.append((self.now, _schedule(every)))
            self.applied(name)

    @rule(
        name=st.sampled_from(KEYED),
        every=st.sampled_from(("@every 1m", "@every 2m")),
        keyed=st.booleans(),
    )
    def apply_keyed(self, name: str, every: str, keyed: bool) -> None:
        """A new definition of k or l: a timing, and whether it uses the key (a slot that
        waits for the key then runs without it, or starts waiting for it)."""
        new = spec(name, self.tenant, every, **self.options, **({"uses": KEY} if keyed else {}))
        if self.do(
            f"apply {name} {every}{'' if keyed else ' without uses'}",
            lambda: self.cluster.store.definitions.apply([new], now=self.now),
        ):
            self.keyed[name] = keyed
            line = self.timelines[name]
            if _schedule(every) != line.schedules[-1][1]:
                line.schedules.append((self.now, _schedule(every)))
            self.applied(name)

    @rule(seats=st.integers(1, 2))
    def set_seats(self, seats: int) -> None:
        """``pulse limits set``: the key lets one run in at a time, or two."""
        self.set_key(seats, self.rate)

    @rule(rate=st.sampled_from((None, "1/min", "2/min")))
    def set_rate(self, rate: str | None) -> None:
        """``pulse limits set --rate``: at most one or two of k's and l's runs start in any
        minute, or no such limit: a slot passed over waits for the key's window."""
        self.set_key(self.seats, rate)

    def set_key(self, seats: int, rate: str | None) -> None:
        text = f"limits set {KEY} --max-concurrent {seats}{f' --rate {rate}' if rate else ''}"
        limits = self.cluster.store.limits
        if self.do(text, lambda: limits.set(KEY, tenant=self.tenant, max_concurrent=seats,
                                            rate=rate)):  # fmt: skip
            self.seats, self.rate = seats, rate

    @rule(places=st.sampled_from((None, 1, 2)))
    def tenant_limit(self, places: int | None) -> None:
        """``pulse tenants set-limit`` (runs at once across the tenant's jobs) or
        ``clear-limit``: a run held past its pass may take the tenant's last place."""
        tenants = self.cluster.store.tenants
        if places is None:
            self.do("tenants clear-limit", lambda: tenants.clear_limit(self.tenant))
        else:
            self.do(f"tenants set-limit {places}", lambda: tenants.set_limit(self.tenant, places))

    @rule()
    def convert_e(self) -> None:
        """e made an ordinary job (an apply without ``each_zone``) or an each-zone job
        again, as it stands: an ordinary e runs its slots from the next after the apply, and
        its child in zone z goes with its history in the apply's transaction; an each-zone e
        records the slots it owes and never runs again, and the keeper makes its child. An
        apply without ``paused`` resumes a paused job; a ``pause --until`` holds, one
        given before a pause too."""
        old = self.runs_as("e")
        line = self.timelines[old]
        every = str(line.schedules[-1][1].expr)
        each = not self.each_zone
        new = spec("e", self.tenant, every, **{**self.kept("e"), "each_zone": each})
        child = None if each else self.cluster.run(self.cluster.store.get(old, self.tenant))
        quiet = self.quiet("e")
        held = line.quiet[-1][1] if quiet else None  # a pause --until holds
        if not self.do(
            f"apply e {every}{' each-zone' if each else ' without each-zone'}",
            lambda: self.cluster.store.definitions.apply([new], now=self.now),
        ):
            return
        self.each_zone = each
        del self.timelines[old]
        if child is not None:
            self.ledger.forget(child.id)
        if each:
            self.make_child()
        if quiet and held is None:  # paused: resumed, but for a pause --until before it
            until = self.cluster.run(self.cluster.store.get(self.runs_as("e"), self.tenant))
            held = (
                until.paused_until if until.paused_until and until.paused_until > self.now else None
            )
        made = Timeline(self.now)
        made.schedules.append((self.now, _schedule(every)))
        if held is not None:
            made.quiet.append([self.now, held])
        self.timelines[self.runs_as("e")] = made

    @rule(name=st.sampled_from(("a", "e", "m")))
    def pause_by_apply(self, name: str) -> None:
        """An apply of the job's definition as it stands with ``paused: true``: a pause
        written as a definition."""
        line = self.timelines[self.runs_as(name)]
        without = NO_CALENDAR if name == "a" and not self.a_calendar else {}
        every = str(line.schedules[-1][1].expr)
        new = spec(name, self.tenant, every, **self.kept(name), **without, paused=True)
        if self.do(
            f"apply {name} paused",
            lambda: self.cluster.store.definitions.apply([new], now=self.now),
        ):
            if self.quiet(name):
                line.quiet[-1][1] = None
            else:
                line.quiet.append([self.now, None])

    @rule()
    def rollback_a(self) -> None:
        """a back to its first definition (``@every 1m``, with its calendar)."""
        if self.do(
            "rollback a --to 1",
            lambda: self.cluster.store.revisions.rollback("a", self.tenant, 1, now=self.now),
        ):
            self.options = self.first_options
            self.a_calendar = True
            line = self.timelines["a"]
            if str(line.schedules[-1][1].expr) != "@every 1m":
                line.schedules.append((self.now, _schedule("@every 1m")))
            self.applied("a")

    @rule(minutes=st.integers(2, 6), change=st.sampled_from(("@every 1m", "@every 2m", "back")))
    def change_a_after_an_outage(self, minutes: int, change: str) -> None:
        """No node runs for a while, and before one does a's definition is applied anew (or
        rolled back): a new timing records the overdue slots it moves a past, an unchanged
        one leaves them to catch-up."""
        self.steps.append(f"outage {minutes}m without a pass")
        self.cluster.clock += minutes * MINUTE
        if change == "back":
            self.rollback_a()
        else:
            self.apply_a(change)

    @precondition(lambda self: "c" in self.timelines)
    @rule()
    def remove_c(self) -> None:
        job = self.cluster.run(self.cluster.store.get("c", self.tenant))
        if self.do("remove c", lambda: self.cluster.store.remove("c", self.tenant)):
            del self.timelines["c"]
            self.ledger.forget(job.id)

    @precondition(lambda self: "c" not in self.timelines)
    @rule()
    def add_c(self) -> None:
        if self.do(
            "add c",
            lambda: self.cluster.store.definitions.add(
                spec("c", self.tenant, **self.kept("c")), now=self.now
            ),
        ):
            self.timelines["c"] = self.timeline("c")

    @precondition(lambda self: "c" in self.timelines)
    @rule(max_runs=st.sampled_from((None, 1, 2)))
    def max_runs_c(self, max_runs: int | None) -> None:
        """c, chained after a, with another ``max_runs``: done, it is released nothing;
        given more runs, it waits for a's next success."""
        self.c_max_runs, before = max_runs, self.c_max_runs
        new = spec("c", self.tenant, **self.kept("c"))
        if self.do(
            f"apply c max runs {max_runs}",
            lambda: self.cluster.store.definitions.apply([new], now=self.now),
        ):
            self.applied("c")
        else:
            self.c_max_runs = before

    @rule(name=st.sampled_from(("w", *FLOWN, *KEYED)))
    def remake(self, name: str) -> None:
        """``pulse jobs remove``, then the job added again under its name, a run of it in
        progress or not: a new job, whose slots are expected from now on; the old job's
        history went with it, and its run still going ends with nothing to write."""
        job = self.cluster.run(self.cluster.store.get(name, self.tenant))
        store = self.cluster.store

        async def remake() -> None:
            await store.remove(name, self.tenant)
            await store.definitions.add(spec(name, self.tenant, **self.kept(name)), now=self.now)

        if self.do(f"remove {name}, then add it again", remake):
            self.ledger.forget(job.id)
            self.timelines[name] = self.timeline(name)
            if name == "w":
                self.token = self.cluster.run(store.watch.token("w", self.tenant)) or ""

    @rule(
        name=st.sampled_from(("a", "m", "w", CHILD["e"], *FLOWN, *KEYED)), times=st.integers(1, 4)
    )
    def fail_next(self, name: str, times: int = 1) -> None:
        """The job's next runs fail (a retry is a run): gates and chains see a failure, or
        an attempt that waits for its retry."""
        name = self.runs_as(name)
        self.steps.append(f"{name}'s next {times} runs fail")
        self.failing[name] = times

    @rule(kind=st.sampled_from(("start", "success", "fail")), late=st.integers(0, 3))
    def ping(self, kind: str, late: int) -> None:
        self.do(
            f"ping w {kind}",
            lambda: self.cluster.store.watch.ping(
                self.token, kind, b"out", now=self.now + late * timedelta(seconds=10)
            ),
        )

    @rule(ahead=st.integers(0, 2), handler=st.booleans())
    def adopt_w(self, ahead: int, handler: bool) -> None:
        """``pulse jobs adopt w --at SLOT``: Pulse runs w from its slot ``ahead`` minutes
        after the next on (its handler given, or the one it was made with); the slots
        before stay watched. Refused for a slot it awaits no more, or once adopted."""
        at = self.now.replace(second=0) + (ahead + 1) * MINUTE
        self.do(
            f"adopt w --at +{ahead + 1}m{'' if handler else ' (its own handler)'}",
            lambda: self.cluster.store.watch.adopt(
                "w", self.tenant, at=at, handler=HANDLER if handler else None, now=self.now
            ),
        )

    @rule(schedule=st.sampled_from(("* * * * *", "*/2 * * * *")))
    def apply_w(self, schedule: str) -> None:
        """A new timing of the watch job from its job file, before or after its adoption
        (once Pulse runs it, the file says so: a definition still watching it is refused)."""
        job = self.cluster.run(self.cluster.store.get("w", self.tenant))
        new = spec("w", self.tenant, schedule, watch=job.watch)
        if self.do(
            f"apply w {schedule}", lambda: self.cluster.store.definitions.apply([new], now=self.now)
        ):
            line = self.timelines["w"]
            if _schedule(schedule) != line.schedules[-1][1]:
                line.schedules.append((self.now, _schedule(schedule)))
            self.applied("w")

    @rule()
    def rollback_w(self) -> None:
        """w back to its first definition (watched, every minute); refused once Pulse runs
        it, as that definition watches it."""
        if self.do(
            "rollback w --to 1",
            lambda: self.cluster.store.revisions.rollback("w", self.tenant, 1, now=self.now),
        ):
            line = self.timelines["w"]
            if str(line.schedules[-1][1].expr) != "* * * * *":
                line.schedules.append((self.now, _schedule("* * * * *")))
            self.applied("w")

    @rule()
    def cancel_w(self) -> None:
        self.do(
            "runs cancel w",
            lambda: self.cluster.store.runcontrol.cancel("w", self.tenant, by="model"),
        )

    # -- the rule --------------------------------------------------------------------------

    @invariant()
    def the_ledger_holds(self) -> None:
        """After every step a minute passes with a node's pass, then the ledger is read;
        not after a stall, whose next step meets what is due."""
        if self.stalled:
            self.stalled = False
            return
        self.cluster.clock += MINUTE
        self.tick()
        jobs, runs, queued, flights = self.cluster.run(self.cluster.rows(self.tenant))
        held = {job.name for job in [*self.cluster.held, *self.cluster.lost]}
        # A slot may wait for the key, or for a place of its tenant, while runs held past
        # the pass fill them (they end at the next pass); a wait left open for a slot that
        # no longer waits is unbounded.
        key = self.cluster.run(self.cluster.store.limits.get(KEY, self.tenant))
        waits = self.cluster.run(self.cluster.waits(self.tenant))
        full = key.max_concurrent is not None and len(key.holders) >= key.max_concurrent
        full = full or self.cluster.run(self.cluster.rate_spent(KEY, self.tenant))
        flown = {(f["job_id"], f["slot"]) for f in flights}  # a flight's slot waits too
        blocked = {
            w["name"]
            for w in waits
            if full
            and (
                jobs[w["name"]]["slot_at"] == w["slot"]
                or (jobs[w["name"]]["id"], w["slot"]) in flown
            )
        }
        limits = self.cluster.run(self.cluster.store.tenants.limits(self.tenant))
        if any(limit.running >= limit.max_concurrent for limit in limits):
            blocked = set(jobs)
        found = self.ledger.check(
            jobs, runs, queued, self.timelines, self.now, flights=flights, running=held,
            waiting_for_room=blocked,
        )  # fmt: skip
        found += open_waits(waits, jobs, flights)
        found += left_queued(flights, jobs, blocked, self.now)
        found += self.stale(runs)
        assert not found, unexpected(found) + "\nafter: " + "; ".join(self.steps)
        ahead = {
            (r["job_name"], r["scheduled_for"])
            for r in runs
            if r["status"] == "skipped" and r["finished_at"] < r["scheduled_for"]
        }
        lines = self.cluster.run(self.cluster.audit(self.tenant, self.started))
        # Over any range: from the middle of the history and up to it too.
        middle = self.started + (self.now - self.started) / 2 + timedelta(seconds=1)
        lines += self.cluster.run(self.cluster.audit(self.tenant, middle))
        lines += self.cluster.run(self.cluster.audit(self.tenant, self.started, middle))
        failing = [line for line in lines if _failing(line, ahead)]
        assert not failing, (
            "pulse audit: "
            + "; ".join(
                f"{line.job} {line.slot.isoformat()} {line.verdict}: {line.detail}"
                for line in failing
            )
            + "\nafter: "
            + "; ".join(self.steps)
        )


def _moved(job: dict[str, Any]) -> bool:
    """Whether a calendar or window change takes back the job's skips ahead: it is paused,
    or idle on its first attempt and not triggered (paused until a time or not); or whether
    its running slot's completion leaves those of its old rule to the new one."""
    return job["status"] in ("paused", "running") or (
        job["status"] == "idle" and job["attempt"] == 1 and job["slot_origin"] != "trigger"
    )


def _failing(line: Line, ahead: set[tuple[str, datetime]]) -> bool:
    """A line that breaks the ledger, or a record the job's timing made on a slot the job
    never had. A trigger's or a backfill's run is on no slot of its own; a skip recorded
    ahead of its slot (skip-next, a calendar's) was on one when written, and a new timing
    since may have no such slot."""
    if line.verdict in FAILING:
        return True
    asked = line.origin in ("trigger", "backfill", "rerun", "ping")
    return line.verdict == "unaligned" and not asked and (line.job, line.slot) not in ahead


def _finish(
    job: ClaimedJob, now: datetime, failing: Counter[str], verdict: str | None
) -> tuple[Completion, list[Skip]]:
    """What the node writes for a claimed slot: skipped at its gate or by catch-up at claim,
    else run (failed if the model said so; a retry is a run too)."""
    if verdict is not None:
        return gate_skip(job, verdict, now)
    skip = None if job.flight else plan_at_claim(job, now)
    if skip is not None:
        return skip
    return _ran(job, now, failing)


def _runs(job: ClaimedJob, now: datetime, verdict: str | None) -> bool:
    """Whether the claimed slot runs: neither its gate nor catch-up skips it at its claim."""
    return verdict is None and (job.flight or plan_at_claim(job, now) is None)


def _ran(
    job: ClaimedJob, now: datetime, failing: Counter[str], cancel_by: str | None = None
) -> tuple[Completion, list[Skip]]:
    """The completion of the slot's run, ended at ``now``: failed if the model said so,
    cancelled if an operator asked (``cancel_by``) while it ran."""
    if cancel_by is not None:
        return after_run(job, Outcome("cancelled", f"cancelled by {cancel_by}", 0.01), now)
    outcome = FAILED if failing[job.name] > 0 else OK
    failing[job.name] -= 1
    return after_run(job, outcome, now)


def _lost(cancel_by: str | None, row: dict[str, Any] | None = None) -> Outcome:
    """How the node's recovery ends a slot lost with its node on its last attempt."""
    if cancel_by is not None:
        return Outcome("cancelled", f"cancelled by {cancel_by}; lost with its node", 0.0)
    return Outcome("failed", lost_error(row) if row else "lost with its node", 0.0)


def _schedule(expr: Any) -> Any:
    return parse_schedule(spec("x", "t", expr).schedule)


def _run(cluster: ClusterSettings, profile: hypothesis.settings) -> None:
    OperatorActions.cluster = Cluster(cluster)
    try:
        OperatorActions.TestCase.settings = profile
        OperatorActions.TestCase().runTest()
    finally:
        OperatorActions.cluster.close()


FAST = hypothesis.settings(
    max_examples=20,
    stateful_step_count=15,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
LONG = hypothesis.settings(FAST, max_examples=20, stateful_step_count=40)


# A guard against a hang, not a bound on speed: 25 s alone on one VM, 112 s in the fast
# tier on one twice as slow.
@pytest.mark.timeout(600)
def test_operator_actions_keep_the_ledger(settings: ClusterSettings) -> None:
    _run(settings, FAST)


# The full suite only (bin/test): the fast tier leaves out e2e.
@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_operator_actions_keep_the_ledger_longer(settings: ClusterSettings) -> None:
    _run(settings, LONG)


# -- sequences the machine found, as plain regression tests -----------------------------


class Sequence:
    """One tenant's jobs on the machine's cluster, stepped by hand."""

    def __init__(self, cluster: ClusterSettings, **jobs: Any) -> None:
        OperatorActions.cluster = Cluster(cluster)
        self.machine = OperatorActions()
        self.machine.make_jobs(**jobs)  # make_jobs' draws: retries, catch_up, pause_after...

    def __enter__(self) -> OperatorActions:
        return self.machine

    def __exit__(self, *exc: object) -> None:
        OperatorActions.cluster.close()


def pause_then_resume(machine: OperatorActions, name: str, hold: str) -> None:
    """``pause`` with the ledger read, then ``resume``; or ``pause --until`` a minute on."""
    if hold == "pause":
        machine.pause(name)
        machine.the_ledger_holds()
        machine.resume(name)
    else:
        machine.pause_until(name, 1)


def test_a_new_timing_after_an_outage_records_the_slots_it_moves_past(
    settings: ClusterSettings,
) -> None:
    """An apply of a new timing, then a rollback, each while a's slots were overdue with no
    node to run them: both moved a past those slots without a record."""
    with Sequence(settings) as machine:
        machine.the_ledger_holds()
        machine.change_a_after_an_outage(3, "@every 2m")
        machine.the_ledger_holds()
        machine.change_a_after_an_outage(4, "back")
        machine.the_ledger_holds()


def test_a_new_timing_over_a_deferred_slot_records_the_old_slots_behind_it(
    settings: ClusterSettings,
) -> None:
    """Found by the machine: a's slots deferred by a window, then an outage and a new timing
    before the window ended. a kept its deferred slot, for its claim to decide under the new
    timing, and the old timing's slots after it that the new one does not have (00:05 of
    `@every 1m` under `@every 2m`) were left without a record."""
    with Sequence(settings) as machine:
        machine.the_ledger_holds()
        machine.window(defer=True, length=3, name="a", start=3)
        machine.the_ledger_holds()
        machine.the_ledger_holds()
        machine.change_a_after_an_outage(2, "@every 2m")
        for _ in range(3):
            machine.the_ledger_holds()


def test_a_window_over_the_next_slot_records_the_slots_it_covers(
    settings: ClusterSettings,
) -> None:
    with Sequence(settings) as machine:
        machine.the_ledger_holds()
        begin = machine.now + timedelta(seconds=30)  # the job's next slot
        machine.do(
            "window a",
            lambda: machine.cluster.store.windows.add(
                begin, begin + 2 * MINUTE, job="a", tenant=machine.tenant, now=machine.now
            ),
        )
        for _ in range(4):
            machine.the_ledger_holds()


@pytest.mark.parametrize("hold", ["pause", "pause_until"])
def test_a_slot_held_at_its_gate_is_recorded_when_the_job_is_paused(
    settings: ClusterSettings, hold: str
) -> None:
    """Found by the machine: b waits at its gate for a's slot while a is paused; pausing b
    (or pausing it until a time) moved it past the slots it owed without a record."""
    with Sequence(settings) as machine:
        machine.pause("a")
        machine.the_ledger_holds()
        machine.advance(2)  # b's slots wait for a's, which never come
        machine.the_ledger_holds()
        pause_then_resume(machine, "b", hold)
        machine.the_ledger_holds()


def test_a_window_on_a_job_held_at_its_gate_records_the_slot_it_moves_past(
    settings: ClusterSettings,
) -> None:
    with Sequence(settings) as machine:
        machine.fail_next("a")
        machine.the_ledger_holds()  # a's slot fails: b's same slot waits at its gate
        machine.the_ledger_holds()
        begin = machine.now + 3 * MINUTE - timedelta(seconds=30)
        machine.do(
            "window b",
            lambda: machine.cluster.store.windows.add(
                begin, begin + MINUTE, job="b", tenant=machine.tenant, now=machine.now
            ),
        )
        machine.the_ledger_holds()


def test_a_new_timing_planned_onto_a_window_records_the_slot(settings: ClusterSettings) -> None:
    with Sequence(settings) as machine:
        for step in (
            lambda: machine.window(name="a", start=6, length=1, defer=False),
            lambda: machine.apply_a(every="@every 2m"),
            lambda: machine.advance(minutes=2),
            lambda: machine.rollback_a(),
        ):
            machine.the_ledger_holds()
            step()
        machine.the_ledger_holds()


def test_a_slot_deferred_into_another_window_is_recorded(settings: ClusterSettings) -> None:
    with Sequence(settings) as machine:
        machine.the_ledger_holds()
        machine.window(name="m", start=2, length=1, defer=True)  # over m's slot 3
        machine.the_ledger_holds()
        machine.window(name="m", start=2, length=1, defer=False)  # over its slot 4
        for _ in range(3):
            machine.the_ledger_holds()


def test_a_new_timing_never_runs_a_slot_skip_next_recorded(settings: ClusterSettings) -> None:
    """Found by the machine: skip-next recorded a's coming slots skipped, then an apply of a
    new schedule planned a onto one of them, and its run overwrote the skipped record."""
    with Sequence(settings) as machine:
        machine.the_ledger_holds()
        machine.skip_next(name="a", count=1)
        machine.the_ledger_holds()
        machine.skip_next(name="a", count=2)
        machine.the_ledger_holds()
        machine.apply_a(every="@every 2m")
        for _ in range(4):
            machine.the_ledger_holds()


def test_a_pause_until_past_a_deferred_slot_records_it(settings: ClusterSettings) -> None:
    """Found by the machine: a's slot deferred by a window to the window's end, then
    `pause --until` moved a past it without a record."""
    with Sequence(settings) as machine:
        machine.the_ledger_holds()
        machine.window(name="a", start=2, length=1, defer=True)  # over a's slot 3
        machine.the_ledger_holds()
        machine.the_ledger_holds()  # slot 3 deferred to 4
        machine.pause_until(name="a", minutes=1)
        for _ in range(3):
            machine.the_ledger_holds()


def test_a_window_never_runs_a_slot_skip_next_recorded(settings: ClusterSettings) -> None:
    """Found by the machine: skip-next recorded a's coming slots skipped, then a window
    re-planned a onto one of them, and its run overwrote the skipped record."""
    with Sequence(settings) as machine:
        machine.the_ledger_holds()
        machine.skip_next(name="a", count=3)
        machine.the_ledger_holds()
        machine.window(name="a", start=2, length=1, defer=False)
        for _ in range(5):
            machine.the_ledger_holds()


def test_a_triggered_run_never_runs_a_slot_skip_next_recorded(settings: ClusterSettings) -> None:
    with Sequence(settings) as machine:
        machine.the_ledger_holds()
        machine.skip_next(name="m", count=3)
        machine.the_ledger_holds()
        store, tenant, now = machine.cluster.store, machine.tenant, machine.now
        machine.do("trigger m", lambda: store.trigger("m", tenant, now=now))
        for _ in range(8):
            machine.the_ledger_holds()


def test_a_resume_after_a_pause_until_keeps_the_slot_held_at_its_gate(
    settings: ClusterSettings,
) -> None:
    """Found by the machine's long profile: b paused until a time that passed, its slot then
    held at its gate (a paused), and `resume b` planned b past the held slot and those
    behind it without a record, though the pause was over."""
    with Sequence(settings) as machine:
        machine.pause("a")
        machine.the_ledger_holds()
        machine.pause_until("b", 1)
        for _ in range(3):  # the pause ends; b's slots wait for a's, which never come
            machine.the_ledger_holds()
        machine.resume("b")
        machine.the_ledger_holds()


def test_a_new_timing_keeps_a_slot_a_window_deferred(settings: ClusterSettings) -> None:
    """Found by the machine once windows and new definitions met: a's slot deferred by a
    window to the window's end, then `rollback a --to 1` planned a to its first run after
    now, past the deferred slot, without a record."""
    with Sequence(settings) as machine:
        machine.the_ledger_holds()
        machine.window(defer=True, length=1, name="a", start=2)
        machine.the_ledger_holds()
        machine.the_ledger_holds()  # a's slot deferred to the window's end
        machine.rollback_a()
        for _ in range(3):
            machine.the_ledger_holds()


def test_a_new_timing_runs_no_slot_skip_next_recorded_after_its_first(
    settings: ClusterSettings,
) -> None:
    """Found by the long profile: skip-next recorded a's next slots of `@every 2m`, then a
    rollback to `@every 1m` planned a onto the first slot without a record, and the run
    after it onto a skipped one, whose record the run overwrote."""
    with Sequence(settings) as machine:
        machine.the_ledger_holds()
        machine.apply_a(every="@every 2m")
        machine.the_ledger_holds()
        machine.skip_next(name="a", count=3)
        machine.the_ledger_holds()
        machine.rollback_a()
        for _ in range(8):
            machine.the_ledger_holds()


def test_a_resume_records_the_slots_a_window_skips_before_the_jobs_next_run(
    settings: ClusterSettings,
) -> None:
    """Found by the long profile: a window added while a was paused skips a's slot after the
    resume; the resume planned a past it, and no completion passed it to record it."""
    with Sequence(settings) as machine:
        machine.pause("a")
        machine.the_ledger_holds()
        machine.window(name="a", start=2, length=1, defer=False)
        machine.the_ledger_holds()
        machine.resume("a")
        for _ in range(3):
            machine.the_ledger_holds()


@pytest.mark.parametrize("hold", ["pause", "pause_until"])
@pytest.mark.parametrize("name", ["a", "e"])
def test_a_pause_records_the_slots_due_that_no_node_took(
    settings: ClusterSettings, name: str, hold: str
) -> None:
    """Found once the audit ran after every step: a's slots due while no node ran, then
    `pause a` (or `pause a --until`) before one did. The pause moved a past them without
    a record, and `pulse audit` called them missing. A pause of the each-zone job e reached
    its child at the keeper's next pass, without a record of what the child owed; a
    `pause --until` never reached it, and the child ran through the pause."""
    with Sequence(settings) as machine:
        machine.the_ledger_holds()
        machine.stall(3)
        pause_then_resume(machine, name, hold)
        for _ in range(3):
            machine.the_ledger_holds()


def test_a_pause_after_failures_records_the_slot_due_when_it_pauses(
    settings: ClusterSettings,
) -> None:
    """Found once m could pause itself: its retry of 00:03 failed at 00:04:30, its second
    failed slot in a row, with its next slot 00:04 due already. The completion paused m
    with its slot at 00:04, and no record of it ever came: a resume continues at the next
    slot to come."""
    with Sequence(settings, retries=1, pause_after=2) as machine:
        machine.fail_next("m", times=4)
        machine.the_ledger_holds()
        machine.advance(1)
        for _ in range(2):
            machine.the_ledger_holds()
        assert machine.quiet("m")  # it paused itself
        machine.resume("m")
        for _ in range(3):
            machine.the_ledger_holds()


def test_a_trigger_of_a_job_paused_until_a_time_keeps_it_paused_until_then(
    settings: ClusterSettings,
) -> None:
    """A trigger of a job paused until a time to come ran once, then went on at the slot
    after the trigger: every slot up to that time ran, though the job was paused."""
    with Sequence(settings) as machine:
        machine.advance(1)
        paused_at = machine.now
        machine.pause_until("a", 7)
        until = machine.cluster.run(machine.cluster.store.get("a", machine.tenant)).slot_at
        machine.trigger("a")
        for _ in range(3):
            machine.the_ledger_holds()
        job = machine.cluster.run(machine.cluster.store.get("a", machine.tenant))
        runs = machine.cluster.run(machine.cluster.store.runs("a", machine.tenant))
        assert job.slot_at == until
        assert [r.origin for r in runs if r.scheduled_for >= paused_at] == ["trigger"]


@pytest.mark.parametrize("change", ["apply", "rollback"])
def test_a_new_timing_keeps_a_pause_until_its_time(settings: ClusterSettings, change: str) -> None:
    """An apply of a new timing (or a rollback to one) over a job paused until a time moved
    it to the new timing's next slot after now: the slots up to that time ran, though the
    job was paused."""
    with Sequence(settings) as machine:
        machine.advance(1)
        paused_at = machine.now
        machine.pause_until("a", 7)
        if change == "rollback":
            machine.apply_a("@every 2m")
            machine.rollback_a()
        else:
            machine.apply_a("@every 2m")
        until = machine.cluster.run(machine.cluster.store.get("a", machine.tenant)).paused_until
        assert until is not None
        for _ in range(8):
            machine.the_ledger_holds()
        runs = machine.cluster.run(machine.cluster.store.runs("a", machine.tenant))
        ran = [r.scheduled_for for r in runs if r.scheduled_for >= paused_at]
        assert ran and min(ran) >= until


@pytest.mark.parametrize("outage", [0, 3])
def test_a_new_timing_over_a_running_slot_goes_on_to_its_slots_after_the_change(
    settings: ClusterSettings, outage: int
) -> None:
    """An apply of a new timing while a slot ran left the completion to walk on with the
    timing its claim read: `@every 2m` changed to `@every 1m` went on at the old timing's
    next slot, and the new timing's slot before it had no record. After an outage the old
    timing's slots that came while the slot ran had none either: the apply's records of
    them were refused for a running job."""
    with Sequence(settings) as machine:
        machine.apply_a("@every 2m")
        machine.the_ledger_holds()
        machine.run_long("a")
        machine.the_ledger_holds()  # the slot of 2 minutes on runs on
        running = machine.cluster.held[0].slot
        if outage:
            machine.change_a_after_an_outage(minutes=outage, change="@every 1m")
        else:
            machine.apply_a("@every 1m")
        changed = machine.now
        for _ in range(3):
            machine.the_ledger_holds()
        runs = machine.cluster.run(machine.cluster.store.runs("a", machine.tenant))
        after = {r.scheduled_for: str(r.status) for r in runs if r.scheduled_for > running}
        old = (running + n * 2 * MINUTE for n in range(1, outage + 1))  # the old timing's
        passed = [slot for slot in old if slot <= changed]
        ran = [changed.replace(second=0) + n * MINUTE for n in (1, 2, 3)]
        assert len(passed) == outage // 2
        assert after == {**dict.fromkeys(passed, "skipped"), **dict.fromkeys(ran, "succeeded")}


def test_an_apply_that_takes_a_running_job_out_of_a_window_runs_its_slots(
    settings: ClusterSettings,
) -> None:
    """An apply that changed the labels a window covers a job by, while a slot of the job
    ran, left its completion to record the window's slots skipped, planned with the rule
    its claim read, for a window that no longer covered the job."""
    with Sequence(settings) as machine:
        store, tenant = machine.cluster.store, machine.tenant
        machine.apply_a("@every 2m")
        since = machine.now.replace(second=0) + 2 * MINUTE  # a's first slot `@every 2m`
        labelled = [spec("a", tenant, "@every 2m", labels={"team": "x"}, **machine.options)]
        machine.do("apply a team=x", lambda: store.definitions.apply(labelled, now=machine.now))
        begin = since + MINUTE  # over 2 and 4 minutes after a's first slot
        machine.do(
            "window team=x",
            lambda: store.windows.add(
                begin, begin + 3 * MINUTE, tenant=tenant, label=("team", "x"), now=machine.now
            ),
        )
        machine.the_ledger_holds()
        machine.run_long("a")
        machine.the_ledger_holds()  # a's first slot runs on
        plain = [spec("a", tenant, "@every 2m", **machine.options)]
        machine.do("apply a", lambda: store.definitions.apply(plain, now=machine.now))
        for _ in range(4):
            machine.the_ledger_holds()
        assert outcomes(machine, "a", since) == {0: "succeeded", 2: "succeeded", 4: "succeeded"}


def outcomes(machine: OperatorActions, name: str, since: datetime) -> dict[int, str]:
    """The job's records from ``since`` on, by minutes after it: their status."""
    runs = machine.cluster.run(machine.cluster.store.runs(name, machine.tenant, limit=100))
    return {
        int((r.scheduled_for - since) / MINUTE): str(r.status)
        for r in runs
        if r.scheduled_for >= since
    }


@pytest.mark.parametrize(
    "hold", [None, "pause", "pause_until", "run_long"], ids=["idle", "paused", "until", "running"]
)
def test_a_window_called_off_runs_the_slots_it_had_recorded_skipped_ahead(
    settings: ClusterSettings, hold: str | None
) -> None:
    """The completion before a window records the slots the window skips ahead of their time.
    Removing the window left them skipped, for a window that no longer was, and the job did
    not run until the window's end would have been; a job paused meanwhile kept them too,
    and its resume planned it past them; so did a job paused until a time before them,
    which the removal did not plan again. A job whose run spans the removal recorded them
    in its completion, planned with the window it was claimed under."""
    with Sequence(settings) as machine:
        machine.the_ledger_holds()
        since = machine.now.replace(second=0) + 2 * MINUTE
        machine.window("a", start=2, length=3, defer=False)  # over 2, 3 and 4 minutes on
        if hold == "run_long":  # the run of 1 minute on spans the removal
            machine.run_long("a")
            machine.the_ledger_holds()
            machine.remove_window()
            for _ in range(3):
                machine.the_ledger_holds()  # the first completes the long run
            assert outcomes(machine, "a", since) == {0: "succeeded", 1: "succeeded", 2: "succeeded"}
            return
        machine.the_ledger_holds()  # the completion of 1 minute on passes the window
        assert outcomes(machine, "a", since) == {0: "skipped", 1: "skipped", 2: "skipped"}
        if hold == "pause":
            machine.pause("a")
        elif hold == "pause_until":
            machine.pause_until("a", 1)  # until 30 s before the window's first slot
        machine.remove_window()
        if hold == "pause":
            machine.resume("a")
        for _ in range(3):
            machine.the_ledger_holds()
        assert outcomes(machine, "a", since) == {0: "succeeded", 1: "succeeded", 2: "succeeded"}


@pytest.mark.parametrize("change", ["calendar", "apply"])
def test_a_holiday_taken_back_runs_the_rest_of_its_day(
    settings: ClusterSettings, change: str
) -> None:
    """A holiday recorded a's slots to midnight skipped. Taking the date out of the calendar,
    or applying a without its calendar, left them so, naming a holiday a no longer had, and
    a started past them."""
    with Sequence(settings) as machine:
        machine.the_ledger_holds()
        machine.calendar(holiday=True)
        since = machine.now.replace(second=0) + MINUTE
        assert set(outcomes(machine, "a", since).values()) == {"skipped"}
        if change == "calendar":
            machine.calendar(holiday=False)
        else:
            machine.apply_a("@every 1m", calendar=False)
        for _ in range(2):
            machine.the_ledger_holds()
        assert outcomes(machine, "a", since) == {0: "succeeded", 1: "succeeded"}


# -- an each-zone job: its child in zone z runs its slots --------------------------------


@pytest.mark.parametrize("held", ["stalled", "running"])
def test_a_new_timing_of_an_each_zone_job_moves_its_child_with_its_records(
    settings: ClusterSettings, held: str
) -> None:
    """The nodes' each-zone keeper moved a child to its parent's new timing a pass later,
    outside the apply: a child whose slots were overdue was moved past them without a
    record, and a running child walked on with its old timing, so the new timing's slot
    before its old next one had none. ``pulse audit`` read a child's definition as it
    stands since the child was made, and found the new timing's slots before the change
    missing."""
    with Sequence(settings) as machine:
        child = CHILD["e"]
        machine.apply_e("@every 2m")
        machine.the_ledger_holds()
        if held == "running":
            machine.run_long(child)
            machine.the_ledger_holds()  # the child's slot of 2 minutes on runs on
            running = machine.cluster.held[0].slot
        else:
            machine.stall(3)  # the child's slots due, no node ran them
        changed = machine.now
        machine.apply_e("@every 1m")
        for _ in range(4):  # after a stall, the first reads the ledger without a pass
            machine.the_ledger_holds()
        since = changed.replace(second=0)
        found = outcomes(machine, child, since - 3 * MINUTE)
        if held == "running":
            assert found[int((running - since) / MINUTE) + 3] == "succeeded"
        else:
            assert "skipped" in found.values()
        assert [found.get(m) for m in (4, 5, 6)] == ["succeeded"] * 3, found  # minutes 1-3 on


def test_skip_next_of_an_each_zone_job_skips_its_childs_next_slot(
    settings: ClusterSettings,
) -> None:
    """``skip-next`` of an each-zone job recorded the parent's slot skipped, which never runs,
    and its child ran it; a trigger of the job made the parent due where no node claims."""
    with Sequence(settings) as machine:
        child = CHILD["e"]
        machine.the_ledger_holds()
        skipped = machine.cluster.run(
            machine.cluster.store.holds.skip_next("e", machine.tenant, 2, now=machine.now)
        )
        assert len(skipped) == 2
        for _ in range(3):
            machine.the_ledger_holds()
        runs = machine.cluster.run(machine.cluster.store.runs(child, machine.tenant))
        status = {r.scheduled_for: str(r.status) for r in runs}
        assert [status[slot] for slot in skipped] == ["skipped", "skipped"]
        assert not machine.cluster.run(machine.cluster.store.runs("e", machine.tenant))
        machine.trigger("e")
        assert machine.steps[-1] == "trigger e (refused)"


@pytest.mark.parametrize("name", ["a", "e"])
def test_an_apply_that_pauses_a_job_records_the_slots_it_owes(
    settings: ClusterSettings, name: str
) -> None:
    """An apply of a job's file with ``paused: true`` while its slots were due: a pause
    written as a definition, which must record what the job owes as ``pulse jobs pause``
    does; then an apply without it resumes the job."""
    with Sequence(settings) as machine:
        machine.the_ledger_holds()
        machine.stall(3)
        machine.pause_by_apply(name)
        machine.the_ledger_holds()
        if name == "a":
            machine.apply_a("@every 1m")
        else:
            machine.apply_e("@every 1m")
        for _ in range(2):
            machine.the_ledger_holds()


def test_a_new_timing_of_an_each_zone_job_never_runs_a_slot_skip_next_recorded(
    settings: ClusterSettings,
) -> None:
    """Found by a random search: `apply e */3 * * * *`, `skip-next e --count 2`, then `apply e
    @every 1m`. The apply moved e's child to the new timing's next slot after now, before
    the slots skip-next had recorded ahead, and the child ran the second of them over its
    record (`pulse audit`: overwritten)."""
    with Sequence(settings) as machine:
        machine.apply_e("*/3 * * * *")
        machine.the_ledger_holds()
        machine.skip_next("e", 2)
        machine.the_ledger_holds()
        machine.apply_e("@every 1m")
        for _ in range(6):
            machine.the_ledger_holds()


def test_a_new_timing_of_an_each_zone_job_keeps_its_childs_retry(
    settings: ClusterSettings,
) -> None:
    """A new timing of an each-zone job moved a child whose failed slot waited for its retry
    to the new timing's next slot: the retry never ran, and the failed attempt stayed the
    slot's record. A job of its own keeps its retry through an apply; so does the child."""
    with Sequence(settings, retries=1) as machine:
        child = CHILD["e"]
        store, tenant = machine.cluster.store, machine.tenant
        machine.fail_next(child, 1)
        machine.the_ledger_holds()  # the child's slot fails; its retry waits 30 s
        failed = machine.cluster.run(store.get(child, tenant))
        assert failed.attempt == 2
        machine.apply_e("@every 2m")
        kept = machine.cluster.run(store.get(child, tenant))
        assert (kept.slot_at, kept.attempt) == (failed.slot_at, 2)
        for _ in range(3):
            machine.the_ledger_holds()
        runs = machine.cluster.run(store.runs(child, tenant))
        (retried,) = [r for r in runs if r.scheduled_for == failed.slot_at]
        assert (str(retried.status), retried.attempt) == ("succeeded", 2)


def _children(machine: OperatorActions) -> list[str]:
    rows = machine.cluster.run(machine.cluster.rows(machine.tenant))[0]
    return sorted(name for name, job in rows.items() if job["parent_id"] is not None)


@pytest.mark.parametrize("held", ["idle", "running", "removed"])
def test_an_each_zone_job_made_ordinary_takes_its_childs_place_in_the_apply(
    settings: ClusterSettings, held: str
) -> None:
    """An apply that made an each-zone job an ordinary one (or removed it) left its children
    to the nodes' keeper, up to its pass later: a child ran on the slots its parent, due
    again, ran too. The children go in the apply's transaction now, a running one's run
    included; the job runs its slots from the next one after the apply."""
    with Sequence(settings) as machine:
        machine.the_ledger_holds()
        if held == "running":
            machine.run_long(CHILD["e"])
            machine.the_ledger_holds()
            assert [job.name for job in machine.cluster.held] == [CHILD["e"]]
        if held == "removed":
            machine.cluster.run(machine.cluster.store.remove("e", machine.tenant))
            del machine.timelines[CHILD["e"]]
        else:
            machine.convert_e()
            assert machine.steps[-1] == "apply e @every 1m without each-zone"
        assert _children(machine) == [], "the child went with the apply"
        changed = machine.now.replace(second=0)
        for _ in range(3):
            machine.the_ledger_holds()
        if held != "removed":
            found = outcomes(machine, "e", changed)
            assert [found.get(m) for m in (1, 2, 3)] == ["succeeded"] * 3, found


@pytest.mark.parametrize("held", ["stalled", "running"])
def test_a_job_made_each_zone_records_the_slots_it_owes(
    settings: ClusterSettings, held: str
) -> None:
    """An apply that made an ordinary job an each-zone one parked it, never due again,
    without a record of the slots it owed (due, no node took them) or of those that came
    while its slot ran; and the running slot's completion made it due again where no node
    claims. They are recorded skipped now, and a running slot ends with its run."""
    with Sequence(settings) as machine:
        machine.convert_e()  # an ordinary job
        machine.the_ledger_holds()
        if held == "running":
            machine.run_long("e")
            machine.the_ledger_holds()
            machine.stall(2)  # two more slots come while the run goes on
        else:
            machine.stall(3)
        machine.convert_e()  # each-zone again
        assert machine.steps[-1] == "apply e @every 1m each-zone"
        for _ in range(3):  # after a stall, the first reads the ledger without a pass
            machine.the_ledger_holds()
        reasons = machine.cluster.run(machine.cluster.store.runs("e", machine.tenant))
        recorded = [r.last_error for r in reasons if str(r.status) == "skipped"]
        assert recorded and all("made an each-zone job before it ran" in r for r in recorded)
        parent = machine.cluster.run(machine.cluster.store.get("e", machine.tenant))
        assert (str(parent.status), parent.each_zone) == ("idle", True)
        assert parent.next_run_at.year == 9999
        assert _children(machine) == [CHILD["e"]]


def test_a_cancel_of_an_each_zone_job_cancels_its_childs_run(settings: ClusterSettings) -> None:
    """``pulse runs cancel`` of an each-zone job said none of its runs was running: its
    children run its slots. It asks each child running the slot to stop, as for a job of
    its own, and the slot is recorded cancelled."""
    with Sequence(settings) as machine:
        child = CHILD["e"]
        machine.run_long(child)
        machine.the_ledger_holds()
        (running,) = machine.cluster.held
        machine.cancel_run("e")
        assert machine.steps[-1] == "runs cancel e"
        machine.the_ledger_holds()
        runs = machine.cluster.run(machine.cluster.store.runs(child, machine.tenant))
        (cancelled,) = [r for r in runs if r.scheduled_for == running.slot]
        assert (str(cancelled.status), cancelled.last_error) == ("cancelled", "cancelled by model")
        machine.cancel_run("e")
        assert machine.steps[-1] == "runs cancel e (refused)"  # none runs now


def test_skip_next_of_a_slot_kept_under_a_new_timing_walks_the_new_timing_after_the_change(
    settings: ClusterSettings,
) -> None:
    """Found by a random search: m's slot (*/3) moved to the next business day by a holiday,
    then a new timing (*/2 and */3), then ``skip-next m``. The skip walked the new timing
    from the kept slot, recording the holiday's skip of 00:04, a slot of no timing in force
    then (``pulse audit``: unaligned); walking it from the change on lost the skips of the
    kept slot's day (the calendar's group of a slot the walk no longer has)."""
    with Sequence(settings) as machine:
        machine.the_ledger_holds()
        machine.apply_m(("*/3 * * * *",))
        machine.the_ledger_holds()
        machine.stall(2)
        machine.calendar(holiday=True)  # m's slot, due, moves to the next business day
        machine.apply_m(("*/2 * * * *", "*/3 * * * *"))
        machine.the_ledger_holds()
        machine.skip_next("m", 1)
        for _ in range(2):
            machine.the_ledger_holds()


@pytest.mark.parametrize("paused", [True, False], ids=["paused-by-apply", "idle"])
def test_a_job_made_done_by_an_apply_has_the_slots_it_owed_on_their_slots(
    settings: ClusterSettings, paused: bool
) -> None:
    """Found by a random search: m ran five slots, its next ones came due with no pass to
    run them, an apply paused it (recording them) or not, and then one gave it a
    ``max_runs`` of 4: done at once, the slots it owed recorded skipped. The audit took a
    done job's slots to end at its last run, and listed those records ``unaligned``. Then
    ``max_runs`` unset: m runs again from its next slot."""
    with Sequence(settings) as machine:
        for _ in range(8):
            machine.the_ledger_holds()
        machine.stall(2)
        if paused:
            machine.pause_by_apply("m")
        machine.max_runs_m(4)
        assert machine.steps[-1] == "m done"
        for _ in range(3):  # after a stall, the first reads the ledger without a pass
            machine.the_ledger_holds()
        machine.max_runs_m(None)
        for _ in range(3):
            machine.the_ledger_holds()
        assert machine.cluster.run(machine.cluster.store.get("m", machine.tenant)).runs_done > 5


def test_a_holiday_taken_out_walks_a_kept_slot_on_to_the_new_timing_after_its_change(
    settings: ClusterSettings,
) -> None:
    """Found by a random search: m (*/3) due with no pass to run it, a holiday put into its
    calendar (its slot moved to the next business day, the day's later slot recorded
    skipped ahead), a new timing (*/2 and */3, the slot kept), then the holiday taken out.
    Planning m again walked the new timing from the kept slot, and recorded 00:04, a slot
    of no timing in force then (``pulse audit``: unaligned), skipped "by pulse jobs
    skip-next", which nobody ran; the kept slot said the same. The walk starts at the
    change, and the kept slot, behind a slot decided already, says so."""
    with Sequence(settings) as machine:
        machine.apply_m(("*/3 * * * *",))
        machine.stall(5)
        machine.calendar(holiday=True)  # m's slot, due, moves to the next business day
        for _ in range(2):  # after a stall, the first reads the ledger without a pass
            machine.the_ledger_holds()
        machine.apply_m(("*/2 * * * *", "*/3 * * * *"))
        machine.calendar(holiday=False)
        machine.the_ledger_holds()
        runs = machine.cluster.run(machine.cluster.store.runs("m", machine.tenant))
        assert not [r for r in runs if "skip-next" in (r.last_error or "")]


def test_a_chained_job_done_and_given_more_runs_runs_no_slot_released_while_it_was_done(
    settings: ClusterSettings,
) -> None:
    """c, chained after a, done after one run: a's successes meanwhile were queued for it,
    and once given more runs it ran every one of them. It is released nothing while done,
    and waits for a's next success; removed and added again, it starts anew."""
    with Sequence(settings) as machine:
        machine.max_runs_c(1)
        for _ in range(5):
            machine.the_ledger_holds()
        assert "c done" in machine.steps
        machine.max_runs_c(None)
        for _ in range(3):
            machine.the_ledger_holds()
        machine.max_runs_c(1)
        machine.the_ledger_holds()
        machine.remove_c()
        machine.add_c()
        for _ in range(3):
            machine.the_ledger_holds()


def test_a_rollback_to_a_lower_max_runs_makes_a_job_done_as_an_apply_would(
    settings: ClusterSettings,
) -> None:
    """m made with ``max_runs`` 3 and run to done, given 4 (idle again), then, with its
    next slots due and no pass to run them, rolled back to its first definition: the
    rollback reads ``max_runs`` 3 against the runs m ran, as an apply does, and m is done at
    once; the slots it owed by then are recorded skipped, and none runs after. (With
    another timing too, it would run once more, as a done job given another schedule
    does: docs/jobs.md.)"""
    with Sequence(settings, max_runs=3) as machine:
        while "m done" not in machine.steps:
            machine.the_ledger_holds()
        machine.max_runs_m(4)
        machine.stall(4)
        machine.rollback_m()
        assert machine.steps[-2:] == ["rollback m --to 1", "m done"], machine.steps
        for _ in range(4):
            machine.the_ledger_holds()
        store = machine.cluster.store
        assert machine.cluster.run(store.get("m", machine.tenant)).status == "done"
        runs = machine.cluster.run(store.runs(job="m", tenant=machine.tenant))
        owed = [r.last_error for r in runs if r.status == "skipped"]
        assert owed and set(owed) == {
            "skipped by pulse jobs rollback: max_runs 3 reached before it ran"
        }
