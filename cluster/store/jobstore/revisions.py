"""Job revisions, the part of ``JobStore`` that reads a job's history and rolls it back
(``pulse jobs history``, ``pulse jobs rollback``, the API and the console).

The rows are written by the triggers on ``jobs`` (migration 029) in the transaction of each
change, whatever made it; this part only reads them, names who changes jobs on its
connection (``act_as``), and turns a revision's definition back into a ``JobSpec`` that
``Definitions.apply`` writes as a new revision. Why so: docs/design/revisions.md.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any
from uuid import UUID

from cluster.errors import InvalidInput
from cluster.jobs import gates
from cluster.jobs.masking import MASK  # a literal credential, as a revision records it
from cluster.jobs.models import iso
from cluster.jobs.spec import OPTIONS, JobSpec
from cluster.store.jobstore.definitions import Definitions
from cluster.store.jobstore.scoped import ScopedConnection
from cluster.store.jobstore.specs import ApplyResult

HOWS = ("cli", "file", "module", "sync", "api", "sql")


@dataclass(frozen=True)
class Revision:
    tenant: str
    name: str
    revision: int
    job_id: UUID
    change: str  # created | updated | removed
    at: datetime
    who: str
    how: str  # one of HOWS
    definition: dict[str, Any]
    diff: dict[str, list[Any]]  # field: [before, after]

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Revision:
        return cls(
            tenant=row["tenant_id"],
            name=row["job_name"],
            revision=row["revision"],
            job_id=row["job_id"],
            change=row["change"],
            at=row["at"],
            who=row["who"],
            how=row["how"],
            definition=row["definition"],
            diff=row["diff"],
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "job": self.name,
            "revision": self.revision,
            "job_id": str(self.job_id),
            "change": self.change,
            "at": iso(self.at),
            "who": self.who,
            "how": self.how,
            "diff": self.diff,
            "definition": self.definition,
        }


@dataclass(frozen=True)
class Rollback:
    """What a rollback wrote: the revision it restored and the new one (None: the job's
    definition was that revision's already, nothing written)."""

    restored: int
    revision: int | None


class Revisions:
    def __init__(self, db: ScopedConnection, definitions: Definitions) -> None:
        self._db = db
        self._definitions = definitions

    async def act_as(self, who: str, how: str) -> None:
        """Name who changes jobs on this connection, and how, for the revisions its changes
        write (``""`` unsets both: the triggers fall back to application_name and sql)."""
        if how and how not in HOWS:
            raise InvalidInput("how", f"must be one of {', '.join(HOWS)}")
        await self._db.one("act_as", {"who": who, "how": how})

    async def history(
        self, name: str, tenant: str, *, before: int | None = None, limit: int = 100
    ) -> list[Revision]:
        """The revisions of (tenant, name), newest first; [] if it never existed (or is
        out of this store's scope)."""
        params = {"tenant_id": tenant, "name": name, "before": before, "limit": limit}
        return [Revision.from_row(r) for r in await self._db.all("job_revisions", params)]

    async def rollback(
        self, name: str, tenant: str, to: int, *, now: datetime | None = None
    ) -> Rollback:
        """Write revision ``to``'s definition as a new revision of the job (creating it
        again if it was removed). ``InvalidInput`` naming ``to`` for a revision the job
        does not have; nothing is written then."""
        async with self._db.transaction():
            return await self.restore(await self.spec_at(name, tenant, to), to, now=now)

    async def spec_at(self, name: str, tenant: str, to: int) -> JobSpec:
        """Revision ``to``'s definition as a spec to apply (``InvalidInput`` on ``to`` if
        the job has no such revision); the API admits it like any job it writes."""
        row = await self._db.one(
            "job_revision", {"tenant_id": tenant, "name": name, "revision": to}
        )
        if row is None:
            raise InvalidInput("to", f"job {name!r} in tenant {tenant!r} has no revision {to}")
        return await self._spec_of(Revision.from_row(row))

    async def restore(self, spec: JobSpec, to: int, *, now: datetime | None = None) -> Rollback:
        """Apply ``spec`` (``spec_at(..., to)``) as the job's newest revision."""
        async with self._db.transaction():
            result = await self._definitions._apply([spec], "pulse jobs rollback", now=now)
            if not result.changed:
                return Rollback(to, None)
            job = await self._db.job("get_job", spec.name, spec.tenant)
            return Rollback(to, job.revision)

    async def _spec_of(self, old: Revision) -> JobSpec:
        handler = str(old.definition["handler"])
        if MASK in handler:  # a literal credential: the job's own handler, if it is the same
            found = await self._db.one(
                "job_masked_handler", {"tenant_id": old.tenant, "name": old.name}
            )
            if found is None or found["handler"] != handler:
                raise InvalidInput(
                    "to",
                    f"revision {old.revision}'s handler held a literal credential, recorded "
                    "masked: write the handler with ${env:NAME} and apply it instead",
                )
            handler = (await self._db.job("get_job", old.name, old.tenant)).handler
        # What `jobs adopt` set (adopt_at) is recorded, not restored: not an option.
        kwargs = recorded_options(old.definition)
        after, match = old.definition.get("after"), old.definition.get("after_match")
        spec = JobSpec(**{**kwargs, "name": old.name, "tenant": old.tenant, "handler": handler})
        if after is None:  # recorded before revisions held edges: the job keeps its own
            now = await self._db.one("get_job", {"tenant_id": old.tenant, "name": old.name})
            links = [] if now is None else await self._db.all("gate_neighbours", {"id": now["id"]})
            after = [r["name"] for r in links if r["side"] == "up"]
            match = links[0]["match"] if after else None
        if after:
            spec = replace(spec, after=tuple(after), after_match=match or gates.DEFAULT_MATCH)
        return spec.validated()


def recorded_options(definition: dict[str, Any]) -> dict[str, Any]:
    """The options a revision's definition records, as ``JobSpec`` fields: each under its
    name, or its column in revisions written before the names (``max_retries``); one it
    does not hold (added since) or holds as null takes its default."""
    found: dict[str, Any] = {}
    for d in OPTIONS.recorded:
        value = definition.get(d.name, definition.get(str(d.column)))
        if value is None:
            continue
        found[d.name] = tuple(value) if isinstance(d.default, tuple) else value
    return found


def result_of(result: ApplyResult) -> dict[str, list[str]]:
    return {
        "created": result.created,
        "updated": result.updated,
        "unchanged": result.unchanged,
        "removed": result.removed,
    }
