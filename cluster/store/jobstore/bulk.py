"""Job definitions written set-wise: what ``Definitions`` runs so that applying many jobs
costs a few statements a batch, not several a job (docs/design/revisions.md, "Bulk apply").

An apply takes its jobs ``BATCH`` at a time (``chunks``): their rows read in one statement
(``jobs_named``) and upserted in one, a JSON list of rows by column name (``upsert_jobs``,
whose triggers write the batch's revisions); a plan's check locks all of its jobs in one
(``lock_jobs``); the few jobs whose planned slot lies on records are
found in one statement (``jobs_recorded_from``); and each shard is woken once.
"""

from __future__ import annotations

from collections.abc import (
    Awaitable,
    Callable,
    Collection,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from datetime import datetime
from typing import Any, TypeVar
from uuid import UUID

from psycopg.types.json import Jsonb

from cluster.jobs.spec import JobSpec
from cluster.store.connect import Row
from cluster.store.jobstore.scoped import ScopedConnection
from cluster.store.jobstore.specs import check_params

__all__ = [
    "BATCH",
    "Key",
    "chunks",
    "locked_revisions",
    "notify",
    "probe",
    "recorded_from",
    "rolled_back",
    "rows_edged",
    "rows_named",
    "upsert",
]

BATCH = 1000  # jobs a statement writes: a few hundred kB of JSON
Key = tuple[str, str]  # (tenant, name)
_T = TypeVar("_T")


def chunks(specs: Sequence[_T]) -> Iterator[Sequence[_T]]:
    """``specs`` ``BATCH`` at a time: what one statement reads or writes, and what an
    apply holds in memory at once."""
    for start in range(0, len(specs), BATCH):
        yield specs[start : start + BATCH]


def _keys(keys: Iterable[Key]) -> dict[str, list[str]]:
    pairs = list(keys)
    return {"tenant_ids": [t for t, _ in pairs], "names": [n for _, n in pairs]}


async def rows_named(db: ScopedConnection, keys: Iterable[Key]) -> dict[Key, Row]:
    """The rows of the jobs of ``keys`` that exist (in this store's scope), by key."""
    rows = await db.all("jobs_named", _keys(keys))
    return {(r["tenant_id"], r["name"]): r for r in rows}


async def rows_edged(db: ScopedConnection, specs: Sequence[JobSpec]) -> dict[Key, Row]:
    """The rows of the jobs of ``specs`` that exist and are gated, or whose spec names
    upstreams, by key: those an apply writes edges for."""
    after = _keys((s.tenant, s.name) for s in specs if s.after)
    params = {
        **_keys((s.tenant, s.name) for s in specs),
        **{f"after_{k}": v for k, v in after.items()},
    }
    rows = await db.all("jobs_edged", params)
    return {(r["tenant_id"], r["name"]): r for r in rows}


async def locked_revisions(db: ScopedConnection, keys: Iterable[Key]) -> dict[Key, int]:
    """The revision of each job of ``keys`` that exists, its row locked until the
    transaction ends."""
    rows = await db.all("lock_jobs", _keys(keys))
    return {(r["tenant_id"], r["name"]): int(r["revision"]) for r in rows}


def _plain(value: Any) -> Any:
    """A parameter of ``upsert_jobs`` as JSON holds it; ``jsonb_populate_recordset`` reads
    it back as the column's type (an ISO time, a UUID's text, an array's list)."""
    if isinstance(value, Jsonb):
        return value.obj
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, tuple):
        return list(value)
    return value


async def upsert(
    db: ScopedConnection, jobs: Sequence[Mapping[str, Any]], *, replace: bool
) -> dict[Key, Row]:
    """``upsert_jobs`` of ``jobs`` (each the parameters of one job, by column), in one
    statement; the rows it wrote, by key. Text the driver could not send is refused first,
    naming its key, as for any statement (``check_params``)."""
    if not jobs:
        return {}
    for params in jobs:
        check_params(dict(params))
    batch = [{column: _plain(value) for column, value in params.items()} for params in jobs]
    rows = await db.all("upsert_jobs", {"jobs": Jsonb(batch), "replace": replace})
    return {(r["tenant_id"], r["name"]): r for r in rows}


class _RolledBack(Exception):  # carries a savepoint's rows out of it, never an error
    def __init__(self, rows: dict[Key, Row]) -> None:
        self.rows = rows


async def probe(db: ScopedConnection, jobs: Sequence[Mapping[str, Any]]) -> dict[Key, Row]:
    """The rows ``upsert`` of ``jobs`` (replacing) would write, from the upsert itself run
    in a savepoint that is then rolled back: "would change" and "where it would move"
    mean exactly what an apply does."""
    return await rolled_back(db, lambda: upsert(db, jobs, replace=True))


async def rolled_back(
    db: ScopedConnection, write: Callable[[], Awaitable[dict[Key, Row]]]
) -> dict[Key, Row]:
    """The rows ``write`` returns, run in a savepoint that is then rolled back."""
    try:
        async with db.transaction():
            raise _RolledBack(await write())
    except _RolledBack as done:
        return done.rows


async def recorded_from(db: ScopedConnection, slots: Sequence[tuple[UUID, datetime]]) -> set[UUID]:
    """Of the (job id, slot) pairs, the jobs with a run record at or after their slot."""
    if not slots:
        return set()
    params = {"ids": [i for i, _ in slots], "froms": [s for _, s in slots]}
    return {r["id"] for r in await db.all("jobs_recorded_from", params)}


async def notify(db: ScopedConnection, shards: Collection[int]) -> None:
    """Wake the claim loops of each of ``shards`` once, when the transaction commits."""
    if shards:
        await db.all(
            "notify_shards", {"channel": db.settings.wake_channel, "shards": sorted(shards)}
        )
