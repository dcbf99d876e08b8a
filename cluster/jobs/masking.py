"""A handler as it is shown: literal credentials masked, wherever a job is rendered.

A handler should name its secrets (``${env:NAME}``, resolved on the node), but an operator
may write one in: a password in a URL (``postgresql://app:pw@db``), an ``Authorization`` or
``X-Api-Key`` header of an ``http:`` job, ``PGPASSWORD=...`` or ``--password ...`` in a shell
command, a key of a body. The API, the console, ``pulse jobs`` (text and JSON), revisions
and the API's search (``?q=``) all see ``shown(handler)``, never the handler itself, so no
reader learns a secret and no search matches inside one. A value that is a reference
(``${env:NAME}``, ``$NAME``) is left as it is. Best effort by pattern: a secret under a name
no pattern knows is shown.

The database holds the same rules as ``job_handler_shown`` (the revisions and the search
use it); ``tests/integration/test_masking.py`` checks that both agree on its examples.
"""

from __future__ import annotations

import re

__all__ = ["MASK", "WORD", "shown"]

MASK = "***"
# What a name that holds a secret contains (case aside). Every rule below needs it, or an
# ``@`` (a URL's password): a handler with neither is shown as it is, which the SQL that
# writes pages of jobs checks first (cluster.jobs.sqljson), the rules costing far more.
WORD = (
    r"(?:password|passwd|secret|token|api[-_]?key|access[-_]?key|private[-_]?key|auth"
    r"|cookie|credential|session|signature|dsn)"
)
_NAME = r"[A-Za-z0-9_-]*" + WORD
_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    # user:password@ in a URL, unless the password is a ${env:NAME}.
    (
        re.compile(r'(://[^/@:"\s]*):(?!\$\{env:[A-Za-z_][A-Za-z0-9_]*\}@)[^@/"\s]+@'),
        r"\1:***@",
    ),
    # "Authorization": "Bearer ..." in a JSON handler (headers, a body).
    (
        re.compile(
            r'("' + _NAME + r'[A-Za-z0-9_-]*"\s*:\s*")(?![^"]*\$\{env:)(?:[^"\\]|\\.)*"',
            re.IGNORECASE,
        ),
        r'\1***"',
    ),
    # -H 'Authorization: Bearer ...' in a shell command.
    (
        re.compile(
            r"(^|[^A-Za-z0-9_-])("
            + _NAME
            + r"[A-Za-z0-9_-]*\s*:\s*(?:(?:bearer|basic|token|digest)\s+)?)"
            r"(?!\$|(?:bearer|basic|token|digest)\s)[^\s\"',;}@]+",
            re.IGNORECASE,
        ),
        r"\1\2***",
    ),
    # --password=... and --password ... (not --password-file).
    (
        re.compile(
            r"(^|\s)(--?" + _NAME + r")(=|\s+)(?![\"']?\$)(\"[^\"]*\"|'[^']*'|[^\s\"']+)",
            re.IGNORECASE,
        ),
        r"\1\2\3***",
    ),
    # PGPASSWORD=..., DB_PASSWORD=..., password=... of a DSN or a URL's query.
    (
        re.compile(
            r"(^|[^A-Za-z0-9_])([A-Za-z0-9_]*" + WORD + r"[A-Za-z0-9_]*\s*=\s*)"
            r"(?![\"']?\$)(\"[^\"]*\"|'[^']*'|[^\s\"'&;]+)",
            re.IGNORECASE,
        ),
        r"\1\2***",
    ),
)


def shown(handler: str) -> str:
    """``handler`` with every literal credential the rules know replaced by ``***``."""
    for pattern, replacement in _RULES:
        handler = pattern.sub(replacement, handler)
    return handler
