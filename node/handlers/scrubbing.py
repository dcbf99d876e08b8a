"""Hiding resolved secrets (``${env:NAME}`` values, a broker URL's password) in what a
forwarded run leaves behind: its error and its output.

A secret can come back in another spelling than the one sent: a receiver that echoes a
header inside JSON escapes its quotes and backslashes, a client library's message shows it
as ``repr`` or inside a URL, percent-encoded. Every such form is replaced, the longest
first, so no part of one survives the scrubbing of a shorter one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from urllib.parse import quote, quote_plus, unquote, urlsplit

MASK = "***"


def forms(secret: str) -> set[str]:
    """``secret`` as it may appear in a text: raw, JSON-escaped (with and without ASCII
    escapes), as Python's ``repr`` of the text and of its UTF-8 bytes, URL-quoted."""
    if not secret:
        return set()
    found = {
        secret,
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        repr(secret)[1:-1],
        ascii(secret)[1:-1],
        repr(secret.encode())[2:-1],
        quote(secret, safe=""),
        quote(secret),
        quote_plus(secret),
    }
    return {form for form in found if form}


def url_secrets(url: str) -> list[str]:
    """The password of a URL as written and decoded (``redis://:p%40ss@h`` gives
    ``p%40ss`` and ``p@ss``)."""
    try:
        password = urlsplit(url).password
    except ValueError:
        return []
    return [password, unquote(password)] if password else []


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every form of every secret replaced by ``***``."""
    every = set().union(*(forms(s) for s in secrets))
    for form in sorted(every, key=len, reverse=True):
        text = text.replace(form, MASK)
    return text
