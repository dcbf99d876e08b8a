"""Resolved secrets hidden in every spelling they can come back in (node/handlers/scrubbing.py,
used by http: and celery: runs): raw, JSON-escaped, repr, URL-quoted, and a broker URL's
password, with secrets holding quotes, backslashes, %, @ and non-ASCII text."""

from __future__ import annotations

import json
from urllib.parse import quote, quote_plus

import pytest

from node.handlers.celerytask import _scrub as scrub_broker
from node.handlers.scrubbing import MASK, forms, scrub, url_secrets

SECRETS = [
    'pa"ss\\word',
    "it's-a-secret",
    "both'and\"quotes",
    "100%pure@host",
    "ünïcødé-sécret-€",
    "tab\there/slash",
    "plus+and space",
]


def spellings(secret: str) -> list[str]:
    return [
        secret,
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        repr(secret),
        ascii(secret),
        repr(secret.encode()),
        quote(secret, safe=""),
        quote(secret),
        quote_plus(secret),
        json.dumps({"echo": secret}),
        repr({"headers": {"Authorization": f"Bearer {secret}"}}),
    ]


@pytest.mark.parametrize("secret", SECRETS)
def test_every_spelling_of_a_secret_is_hidden(secret: str) -> None:
    for text in spellings(secret):
        hidden = scrub(f"error: {text} (end)", [secret])
        assert hidden.startswith("error: ") and hidden.endswith(" (end)")
        assert MASK in hidden
        for form in forms(secret):
            assert form not in hidden, (text, form, hidden)


def test_a_longer_form_is_hidden_whole_before_a_shorter_one() -> None:
    secret = 'a"b'
    assert scrub(json.dumps({"k": secret}), [secret]) == '{"k": "***"}'


def test_empty_secrets_hide_nothing() -> None:
    assert scrub("text", ["", ""]) == "text"
    assert forms("") == set()


@pytest.mark.parametrize("password", ["p@ss:w/rd%", "ünï\"cø'dé", "s3cret"])
def test_a_broker_urls_password_is_hidden_however_a_library_shows_it(password: str) -> None:
    url = f"redis://user:{quote(password, safe='')}@broker:6379/0"
    assert url_secrets(url)[-1] == password
    messages = [
        f"Error connecting to {url}",
        f"auth failed for user with password {password!r}",
        f"kombu: {json.dumps({'password': password})}",
        f"bad password {password}",
    ]
    for message in messages:
        hidden = scrub_broker(message, url)
        assert password not in hidden and quote(password, safe="") not in hidden
        assert repr(password)[1:-1] not in hidden
    assert scrub_broker(f"Error connecting to {url}", url) == (
        "Error connecting to redis://user:***@broker:6379/0"
    )
