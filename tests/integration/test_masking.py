"""A handler as it is shown (``cluster/jobs/masking.py``): literal credentials masked in
every spelling an operator writes them, references left; the database's
``job_handler_shown`` (revisions, the API's search) agrees with it on every example."""

from __future__ import annotations

import json

import pytest

from cluster.jobs.masking import shown
from cluster.store.jobstore.store import JobStore

HEADERS = {"Authorization": "Bearer literal-secret-123", "X-Api-Key": "k-1", "X-Trace": "t"}
# (handler, what is shown)
EXAMPLES = [
    (
        "http:" + json.dumps({"headers": HEADERS, "url": "https://h/x"}, separators=(",", ":")),
        'http:{"headers":{"Authorization":"***","X-Api-Key":"***","X-Trace":"t"},'
        '"url":"https://h/x"}',
    ),
    (
        'http:{"headers":{"Cookie":"sid=abc; x=\\"y\\""},"url":"https://h/x"}',
        'http:{"headers":{"Cookie":"***"},"url":"https://h/x"}',
    ),
    ('http:{"headers":{"Authorization":"Bearer ${env:TOKEN}"},"url":"https://h/x"}', "same"),
    ('http:{"body":{"password":"p-1","user":"u"},"url":"https://h"}', None),
    ("http:GET https://h/x?token=abc-1&page=2", "http:GET https://h/x?token=***&page=2"),
    ("http:GET https://user:pw-1@h/x", "http:GET https://user:***@h/x"),
    ("shell:/usr/bin/pg_dump postgresql://app:dbpass-456@db/app", None),
    ("shell:/usr/bin/pg_dump postgresql://app:${env:PW}@db/app", "same"),
    ("shell:PGPASSWORD=hunter2 DB_PASSWORD='x y' /usr/bin/psql", None),
    ("shell:PGPASSWORD=$PW GITHUB_TOKEN=${GH} /usr/bin/psql", "same"),
    ("shell:mysqldump --password=pw-1 --api-key pw-2 --password-file /etc/pw", None),
    ('shell:curl -H "Authorization: Bearer abc-1" -H "X-Api-Key: k-2" https://h', None),
    ('shell:curl -H "Authorization: Bearer ${env:T}" https://h', "same"),
    ('shell:psql "host=db password=pw-1 user=app"', None),
    ("shell:AWS_SECRET_ACCESS_KEY=abc/def+1 aws s3 ls", None),
    ('celery:{"broker":"redis://:pw-1@h:6379/0","task":"t"}', None),
    ("shell:/usr/bin/backup --tokens 5 --session-id 3 --keep 2", "same"),
    ("reports.jobs:rollup", "same"),
]
SECRETS = ("literal-secret", "k-1", "k-2", "abc-1", "abc/def", "sid=abc", "p-1", "pw-1", "pw-2")
SECRETS += ("dbpass", "hunter2", "'x y'")


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
