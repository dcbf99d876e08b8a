"""A handler as it is shown (``cluster/jobs/masking.py``): literal credentials masked in
every spelling an operator writes them, references left; the database's
``job_handler_shown`` (revisions, the API's search) agrees with it on every example."""

from __future__ import annotations

import pytest

from cluster.jobs.masking import shown
from cluster.store.jobstore.store import JobStore
from tests.helpers.masking import EXAMPLES, SECRETS


@pytest.mark.parametrize(("handler", "expected"), EXAMPLES)
def test_a_literal_credential_is_masked_and_a_reference_is_not(
    handler: str, expected: str | None
) -> None:
    masked = shown(handler)
    if expected == "same":
        assert masked == handler
        return
    if expected is not None:
        assert masked == expected
    assert "***" in masked
    assert not any(s in masked for s in SECRETS)
    assert shown(masked) == masked


def test_the_masking_keeps_what_is_not_a_secret() -> None:
    masked = shown('shell:PGPASSWORD=x y --password z "x y"')
    assert masked == 'shell:PGPASSWORD=*** y --password *** "x y"'
    masked = shown("shell:x 'y y' DB_PASSWORD='x y' z")
    assert masked == "shell:x 'y y' DB_PASSWORD=*** z"


async def test_the_database_masks_as_python_does(store: JobStore) -> None:
    handlers = [h for h, _ in EXAMPLES]
    cur = await store.db.conn.execute(
        "SELECT job_handler_shown(h) AS shown FROM unnest(%(h)s::text[]) WITH ORDINALITY AS t(h, i)"
        " ORDER BY i",
        {"h": handlers},
    )
    assert [r["shown"] for r in await cur.fetchall()] == [shown(h) for h in handlers]
