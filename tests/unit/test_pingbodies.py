"""A ping's body as its run keeps it (cluster/jobs/pingbodies.py): secrets hidden before it
is cut, cut to the job's limit keeping its end, never more bytes than the limit."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from cluster.jobs import pingbodies
from cluster.jobs.pingbodies import MASK, kept, scrubbed

TOKEN = "AbC-def_ghi" + "x" * 32


def test_the_ping_token_is_hidden_raw_and_url_quoted() -> None:
    text = f"curl https://pulse/api/ping/{TOKEN} and {quote(TOKEN, safe='')}"
    assert TOKEN not in scrubbed(text, TOKEN)
    assert scrubbed(text, TOKEN).count(MASK) == 2


def test_api_tokens_url_passwords_and_password_params_are_hidden() -> None:
    text = (
        "auth pulse_abcdefghijklmnopqrstuvwxyz012345 to postgres://app:s3cr3t@db/x "
        "PASSWORD=hunter2 token: t0k3n"
    )
    out = scrubbed(text, TOKEN)
    for secret in ("pulse_abcdefghijklmnopqrstuvwxyz012345", "s3cr3t", "hunter2", "t0k3n"):
        assert secret not in out
    assert "postgres://app:***@db/x" in out


def test_the_usual_spellings_of_a_secret_are_hidden() -> None:
    lines = [
        "DB_PASSWORD=pw-one",
        "export PGPASSWORD='pw-two'",
        "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYpw-three",
        "GITHUB_TOKEN=pw-four",
        "Authorization: Bearer pw-five",
        '{"password": "pw-six", "user": "app"}',
        "mysql --password=pw-seven",
        "token ghp_" + "a1" * 18 + " and key AKIA" + "ABCDEFGHIJKLMNOP",
    ]
    out = scrubbed("\n".join(lines), TOKEN)
    assert "pw-" not in out and "ghp_" not in out and "AKIA" not in out, out
    assert out.count(MASK) == 9
    assert '"user": "app"' in out and "export PGPASSWORD=" in out


def test_a_body_is_cut_to_the_limit_keeping_its_end() -> None:
    body = ("é" * 100 + "the end").encode()
    text = kept(body, TOKEN, 20)
    assert text is not None and text.endswith("the end")
    assert len(text.encode()) <= 20


def test_nothing_kept_for_an_empty_body_or_a_zero_limit_and_nul_is_replaced() -> None:
    assert kept(b"", TOKEN, 100) is None
    assert kept(b"out", TOKEN, 0) is None
    assert kept(b"a\x00b\xff", TOKEN, 100) == "a\ufffdb\ufffd"


def test_a_secret_split_by_the_cut_was_hidden_before_it() -> None:
    body = f"{TOKEN} tail".encode()
    assert kept(body, TOKEN, 8) == f"{MASK} tail"[-8:]


def test_only_what_can_be_kept_and_a_margin_before_it_is_scrubbed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The scrubber's work is bounded by the job's output_limit, not by the 1 MiB body."""
    seen: list[int] = []

    def measured(text: str, token: str) -> str:
        seen.append(len(text))
        return scrubbed(text, token)

    monkeypatch.setattr(pingbodies, "scrubbed", measured)
    body = b"x" * (1024 * 1024 - 21) + b" PASSWORD=hunter2 end"
    text = pingbodies.kept(body, TOKEN, 100)
    assert seen == [100 + pingbodies.SCRUB_MARGIN]
    assert text is not None and text.endswith("PASSWORD=*** end")
