"""Handlers written with literal credentials in every spelling the masking rules know, each
with what is shown of it, and the secrets none of them may show (``cluster/jobs/masking.py``;
``tests/integration/test_masking.py``, ``tests/integration/test_job_json.py``)."""

from __future__ import annotations

import json

HEADERS = {"Authorization": "Bearer literal-secret-123", "X-Api-Key": "k-1", "X-Trace": "t"}
# (handler, what is shown)
EXAMPLES: list[tuple[str, str | None]] = [
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
SECRETS: tuple[str, ...] = ("literal-secret", "k-1", "k-2", "abc-1", "abc/def", "sid=abc", "p-1")
SECRETS += ("pw-1", "pw-2", "dbpass", "hunter2", "'x y'")
