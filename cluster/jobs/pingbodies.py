"""What a ping's body becomes in its run's output: text, secrets hidden, cut to the job's
``output_limit`` (its last bytes, as a shell job's stdout keeps).

A legacy cron pipes whatever its command printed, which may hold the very URL it pings
(so its token), a Pulse API token, a URL with a password, ``DB_PASSWORD=...``,
``Authorization: Bearer ...``, ``{"password": ...}`` or a GitHub or AWS key: each is replaced
by ``***`` before anything is stored (tests/unit/test_pingbodies.py). Best effort: a secret
in a shape none of these knows is kept as printed.
"""

from __future__ import annotations

import re
from urllib.parse import quote

MASK = "***"
_API_TOKEN = re.compile(r"pulse_[A-Za-z0-9_\-]{16,}")
# Bounded repeats only: a body is up to 1 MiB of whatever a cron printed, and an unbounded
# one before a literal ("://") backtracks over the rest of the text at every position.
_URL_PASSWORD = re.compile(
    r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]{0,31}://[^\s:/@]{0,256}:)[^\s@/]{1,256}(?=@)"
)
# A name that holds a secret, anywhere in a longer one (DB_PASSWORD, PGPASSWORD,
# AWS_SECRET_ACCESS_KEY, GITHUB_TOKEN, "password" in JSON), then = or :, an optional quote
# and auth scheme, and the value: `Authorization: Bearer ...`, `{"password": "..."}`.
_SECRET_PARAM = re.compile(
    r"(?P<head>(?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key"
    r"|authorization|credential|cookie)[A-Za-z0-9_-]{0,64}+[\"']?\s{0,8}[=:]\s{0,8}[\"']?"
    r"(?:(?:bearer|basic|token|digest)\s{1,8})?)[^\s&\"',;}]{1,256}",
    re.IGNORECASE,
)
# Tokens whose shape gives them away wherever they stand: GitHub, Slack, an AWS key id.
_KNOWN_TOKEN = re.compile(
    r"\b(?:gh[pousr]_[A-Za-z0-9]{20,255}|github_pat_[A-Za-z0-9_]{20,255}"
    r"|xox[abprs]-[A-Za-z0-9-]{10,255}|AKIA[0-9A-Z]{16})\b"
)
_REPLACEMENT = "\ufffd"
# Scrubbed: the part of a body that can be kept, and this much before it, so a secret cut
# by the window is still seen whole: the work is bounded by the job's output_limit.
SCRUB_MARGIN = 64 * 1024


def scrubbed(text: str, token: str) -> str:
    """``text`` with the ping token (raw or URL-quoted), API tokens, tokens of known shapes,
    URL passwords and ``password=...``-like values hidden."""
    for form in sorted({token, quote(token, safe="")} - {""}, key=len, reverse=True):
        text = text.replace(form, MASK)
    text = _API_TOKEN.sub(MASK, text)
    text = _KNOWN_TOKEN.sub(MASK, text)
    text = _URL_PASSWORD.sub(lambda m: m["head"] + MASK, text)
    return _SECRET_PARAM.sub(lambda m: m["head"] + MASK, text)


def kept(body: bytes, token: str, limit: int) -> str | None:
    """The body as stored: None if empty or the job keeps no output; else scrubbed UTF-8
    text (NUL and undecodable bytes as U+FFFD) of at most ``limit`` bytes, its end kept.
    Only its last ``limit + SCRUB_MARGIN`` bytes are read, and scrubbed before they are
    cut to ``limit``, so no cut leaves half a secret shorter than the margin."""
    if not body or limit <= 0:
        return None
    body = body[-(limit + SCRUB_MARGIN) :]
    text = scrubbed(body.decode("utf-8", "replace").replace("\x00", _REPLACEMENT), token)
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return data[len(data) - limit :].decode("utf-8", "ignore")
