"""The two ways ``complete`` writes a run row: one insert for the batch's jobs that feed
nothing, and ``record_run`` for a job with downstreams, whose gates and chains read the row
within the statement (cluster/store/sql/completion.sql). Both must write the same row."""

from __future__ import annotations

from typing import Any

from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from tests.helpers.history import add, every_10s, finish, rows, run_rows
from tests.helpers.sessions import ALL, Opener, at


def _row(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in ("id", "job_id", "job_name")}


async def test_a_job_that_feeds_others_gets_the_same_run_row_as_one_that_does_not(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await add(store, every_10s("a", retries=2), every_10s("b", retries=2))
    # `feeds` alone, without a downstream: the completion's record_run path, nothing to release.
    await rows(settings, "UPDATE jobs SET feeds = (name = 'b') RETURNING id")
    node = await open_session("n1", "za")
    first = (await node.claim(ALL, 10, 30.0, now=at(10))).jobs
    output = '{"stdout": "out", "result": 3}'
    failed = [finish(j, "failed", error="boom", retry_at=at(20))._replace(output=output)
              for j in first]  # fmt: skip
    assert await node.completions.complete(failed, now=at(11)) == {j.id for j in first}
    # The retry of the same slot rewrites each row (ON CONFLICT, its history kept).
    second = (await node.claim(ALL, 10, 30.0, now=at(20))).jobs
    assert sorted((j.name, j.slot, j.attempt) for j in second) == [
        ("a", at(10), 2),
        ("b", at(10), 2),
    ]
    done = await node.completions.complete([finish(j) for j in second], now=at(22))
    assert done == {j.id for j in second}

    a, b = await run_rows(settings)
    assert (a["job_name"], b["job_name"]) == ("a", "b")
    assert _row(a) == _row(b)
    assert (a["status"], a["attempt"], a["node_id"], a["started_at"]) == (
        "succeeded", 2, "n1", at(20)
    )  # fmt: skip
    assert [h["status"] for h in a["history"]] == ["failed"]
