"""Edges between jobs, the store's side of ``after``: resolving upstream names in the job's
tenant, refusing a match rule that cannot match and a cycle (naming it), writing the edges
with the revision they make, asking the affected gates again, and refusing a --prune that
would leave a job waiting for one it removes. Runs inside ``Definitions``' transaction, so a
refused edge leaves nothing written (docs/design/gates.md)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from uuid import UUID

from psycopg.types.json import Jsonb

from cluster.errors import Conflict, InvalidInput
from cluster.jobs.gates import CHAIN, check_match
from cluster.jobs.spec import JobSpec
from cluster.store.connect import Row
from cluster.store.jobstore.bulk import chunks, rows_edged
from cluster.store.jobstore.scoped import ScopedConnection
from cluster.store.jobstore.specs import label_of
from cluster.timing.schedule import parse_schedule


async def _refuse_edge(
    db: ScopedConnection,
    statement: str,
    params: dict[str, list[str]],
    field: str,
    why: str,
    error: type[InvalidInput] = InvalidInput,
) -> None:
    """``error`` naming the first edge ``statement`` finds (its ``downstream`` waits for its
    ``upstream``) and ``why`` it may not be, if it finds one."""
    found = await db.all(statement, params)
    if found:
        first = found[0]
        raise error(
            field,
            f"{label_of(first['tenant_id'], first['downstream'])} waits for "
            f"{first['upstream']!r}, {why}",
        )


class Gates:
    def __init__(self, db: ScopedConnection) -> None:
        self._db = db

    async def write(self, specs: Sequence[JobSpec], db_now: datetime) -> set[str]:
        """Write the edges of ``specs`` (jobs already upserted); the labels whose edges or
        gate settings changed. ``InvalidInput`` for an unknown upstream, a rule that
        cannot match, or a cycle."""
        changed: set[str] = set()
        downstreams: list[UUID] = []
        upstreams: set[UUID] = set()
        for spec, job in await self._edged(specs):
            ups = await self._upstreams(spec, db_now)
            old = {r["upstream_id"]: r["match"] for r in await self._db.all("gate_edges_of", job)}
            new = {u: spec.after_match for u in ups}
            if old != new:
                # Edges are no column the revision triggers see: the change is recorded here.
                before = await self._db.one("gate_definition", job)
                assert before is not None
                await self._db.all("gate_clear_edges", job)
                await self._db.all(
                    "gate_add_edges", {"id": job["id"], "upstreams": ups, "match": spec.after_match}
                )
                await self._db.one(
                    "gate_revision", {"id": job["id"], "before": Jsonb(before["definition"])}
                )
                changed.add(label_of(spec.tenant, spec.name))
            params = {
                "id": job["id"],
                "gated": bool(ups),
                "after_timeout_s": spec.after_timeout_s,
                "after_failure": spec.after_failure,
            }
            if await self._db.one("gate_set_job", params) is not None:
                changed.add(label_of(spec.tenant, spec.name))
            downstreams.append(job["id"])
            upstreams.update(old)
            upstreams.update(new)
        await self._refuse_waiting([s for s in specs if s.each_zone])
        if not downstreams:
            return changed
        cycle = await self._db.one("gate_cycle", {"ids": downstreams})
        if cycle is not None:
            names = list(reversed(cycle["names"]))
            raise InvalidInput("after", "cycle: " + " -> ".join(names))
        params = {"upstreams": list(upstreams), "downstreams": downstreams}
        for row in await self._db.all("gate_refresh", params):
            await self._db.notify(row["shard_id"])
        return changed

    async def _refuse_waiting(self, specs: Sequence[JobSpec]) -> None:
        """``InvalidInput`` when a job waits for one of ``specs``, each-zone jobs: made one
        by this write, it has no slot of its own any more (its children run them), and what
        waits for it would wait for ever, then skip every slot at its ``--after-timeout``."""
        if specs:
            params = {"tenant_ids": [s.tenant for s in specs], "names": [s.name for s in specs]}
            why = "and an each-zone job has no slot of its own: change what waits for it first"
            await _refuse_edge(self._db, "gate_waiting_on_each_zone", params, "each_zone", why)

    async def _edged(self, specs: Sequence[JobSpec]) -> list[tuple[JobSpec, Row]]:
        """The specs with upstreams, or whose job is gated now, with their jobs' rows: read
        ``BATCH`` at a time, in one statement each (cluster/store/jobstore/bulk.py)."""
        edged = []
        for chunk in chunks(specs):
            jobs = await rows_edged(self._db, chunk)
            edged += [(s, jobs[(s.tenant, s.name)]) for s in chunk if (s.tenant, s.name) in jobs]
        return edged

    async def refuse_orphans(self, kept: dict[str, list[str]]) -> None:
        """``Conflict`` when a job an apply keeps waits for one its --prune removes."""
        why = "which --prune removes: keep it in the file, or change or remove what waits for it"
        await _refuse_edge(self._db, "gate_orphans", kept, "prune", why, Conflict)

    async def _upstreams(self, spec: JobSpec, db_now: datetime) -> list[UUID]:
        if spec.name in spec.after:
            raise InvalidInput("after", f"{spec.name!r} cannot wait for itself")
        params = {"tenant_id": spec.tenant, "names": list(spec.after)}
        rows = {r["name"]: r for r in await self._db.all("gate_upstreams", params)}
        missing = [name for name in spec.after if name not in rows]
        if missing:
            raise InvalidInput(
                "after",
                f"unknown upstream {missing[0]!r} in tenant {spec.tenant!r} "
                "(a job waits only for jobs of its own tenant)",
            )
        schedule = spec.parsed_schedule()
        for name in spec.after:
            row = rows[name]
            if row["each_zone"]:  # its children run its slots, each in its zone
                raise InvalidInput(
                    "after",
                    f"upstream {name!r} is an each-zone job: it runs once in each zone and "
                    "has no slot of its own to wait for",
                )
            if spec.after_match == CHAIN:  # a success of each makes its slots: no clock
                if row["overlap"] == "allow":
                    raise InvalidInput(
                        "after", f"upstream {name!r} runs its slots as flights: it cannot chain"
                    )
                continue
            theirs = parse_schedule(
                row["schedule"], row["tz"], row["dst_repeated"], row["dst_skipped"]
            )
            check_match(spec.name, schedule, spec.tz, name, theirs, spec.after_match, db_now)
        return [rows[name]["id"] for name in spec.after]
