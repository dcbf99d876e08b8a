"""The API's allow-lists, parsed by kind (``api.handlers``, ``api.env``), what the API does
with a handler before writing it (``admission``), and the failed-authentication limiter."""

from __future__ import annotations

import logging

import pytest

from cluster.config.admission import ApiPolicy, NotAllowed, admit
from cluster.config.allowlist import AllowList, parse
from cluster.config.envlist import EnvAllowList
from cluster.config.envlist import parse as parse_env
from cluster.config.httprules import job_url, parse_rule
from cluster.errors import InvalidInput
from cluster.web.limits import FailureLimiter


def test_python_handlers_are_named_exactly() -> None:
    allowed = parse("billing.jobs:rollup,reports.jobs:daily")
    assert allowed.allows_python("billing.jobs:rollup")
    assert not allowed.allows_python("reports.jobs:weekly")
    assert not AllowList().allows_python("billing.jobs:rollup"), "empty allows nothing"


@pytest.mark.parametrize(
    "value",
    [
        "billing",
        "*:*",
        "billing.*:*",
        "sys:*",
        "shell:*",
        "shell:/opt/backup/* x",
        "shell:run ** x",
        "shell:run x;y",
        "shell:run $(x)",
        "http:* https://hooks.example.com*",
        "http:https://hooks.example.com/*",
        "http:https://user@hooks.example.com/",
        "http:FETCH https://hooks.example.com/",
        "http:https://*evil.com/",
        "https://hooks.example.com/",
        "celery:billing tasks",
    ],
)
def test_entries_of_older_releases_or_unsafe_ones_are_refused(value: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse(value)
    assert caught.value.field == "api.handlers"


def test_unparseable_stored_entries_allow_nothing_and_are_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stored = {"api.handlers": "billing.*:*,billing.jobs:rollup,shell:backup *; x"}
    with caplog.at_level(logging.WARNING):
        allowed = AllowList.from_config(stored)
        AllowList.from_config(stored)
    assert allowed.python == frozenset({"billing.jobs:rollup"})
    assert not allowed.shell
    ignored = [r for r in caplog.records if "ignoring api.handlers entry" in r.getMessage()]
    assert len(ignored) == 2


def test_shell_patterns_match_argv_token_by_token() -> None:
    allowed = parse("shell:/opt/backup/run *,shell:/usr/bin/report --day ? **")
    assert allowed.allows_shell(("/opt/backup/run", "nightly"))
    assert not allowed.allows_shell(("/opt/backup/run",)), "* is exactly one token"
    assert not allowed.allows_shell(("/opt/backup/run", "a", "b"))
    assert not allowed.allows_shell(("/opt/backup/runner", "a")), "the program is literal"
    assert allowed.allows_shell(("/usr/bin/report", "--day", "1"))
    assert allowed.allows_shell(("/usr/bin/report", "--day", "1", "x", "y"))
    assert not allowed.allows_shell(("/usr/bin/report", "--day"))


FIND = ("/usr/bin/find", "/data", "-maxdepth", "1")


@pytest.mark.parametrize(
    ("entry", "argv"),
    [
        ("/usr/bin/find /data -maxdepth 1 **", (*FIND, "-fprintf", "/tmp/x", "%p")),
        ("/opt/backup/run *", ("/opt/backup/run", "--config=/tmp/evil.conf")),
        ("/opt/backup/run ?*", ("/opt/backup/run", "-x")),
        ("/bin/cat /data/backups/*", ("/bin/cat", "/data/backups/../admin-token")),
        ("/bin/cat /data/backups/*", ("/bin/cat", "/data/backups/./x/../../admin-token")),
        ("/opt/backup/run *", ("/opt/backup/run", "")),
        ("/opt/backup/run *", ("/opt/backup/run", " ")),
        ("/opt/backup/run **", ("/opt/backup/run", "")),
    ],
    ids=["find", "config", "one-char", "dot-dot", "dot", "empty", "blank", "empty-rest"],
)
def test_globs_never_match_options_dot_segments_or_empty_arguments(
    entry: str, argv: tuple[str, ...]
) -> None:
    assert not parse(f"shell:{entry}").allows_shell(argv)


def test_options_match_only_globs_written_as_options_and_dash_dash_may_be_pinned() -> None:
    allowed = parse("shell:/opt/backup/run --level=* -- *,shell:/bin/cat /data/backups/*")
    assert allowed.allows_shell(("/opt/backup/run", "--level=3", "--", "nightly"))
    assert not allowed.allows_shell(("/opt/backup/run", "--level=3", "nightly"))
    assert not allowed.allows_shell(("/opt/backup/run", "--level=3", "--", "-rf"))
    assert allowed.allows_shell(("/bin/cat", "/data/backups/2026-01-01.tar"))
    assert allowed.allows_shell(("/bin/cat", "/data/backups/a..b"))


def test_http_entries_are_parsed_into_parts() -> None:
    rule = parse_rule("http:POST https://Hooks.Example.com/billing/", "f")
    assert (rule.methods, rule.scheme, rule.host, rule.port, rule.prefix) == (
        frozenset({"POST"}),
        "https",
        "hooks.example.com",
        443,
        "/billing/",
    )
    allowed = parse("http:https://hooks.example.com/,http:GET http://*.example.org:8080/api")
    assert allowed.allows_http("POST", "https://hooks.example.com/x?y=1")
    assert allowed.allows_http("POST", "https://HOOKS.example.com:443/")
    assert not allowed.allows_http("POST", "https://hooks.example.com.evil.io/")
    assert not allowed.allows_http("POST", "http://hooks.example.com/"), "scheme"
    assert not allowed.allows_http("POST", "https://hooks.example.com:8443/"), "port"
    assert allowed.allows_http("GET", "http://a.b.example.org:8080/api/v1")
    assert allowed.allows_http("GET", "http://a.example.org:8080/api")
    assert not allowed.allows_http("GET", "http://example.org:8080/api"), "subdomains only"
    assert not allowed.allows_http("GET", "http://a.example.org:8080/apikeys"), "segment"
    assert not allowed.allows_http("POST", "http://a.example.org:8080/api"), "method"


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.com@evil.io/",
        "https://user:pw@hooks.example.com/",
        "https://hooks.example.com\\@evil.io/",
        "https://hooks.example.com/billing/../admin",
        "https://hooks.example.com/billing/%2e%2e/admin",
        "https://hooks.example.com/billing%2fx",
        "https://hooks.ex\u0430mple.com/",  # a Cyrillic a
        "https://hooks.example.com:99999/",
    ],
)
def test_ambiguous_job_urls_are_refused(url: str) -> None:
    with pytest.raises(InvalidInput):
        job_url(url, "handler.url")


def test_env_names_match_globs_and_never_pulse_ones() -> None:
    allowed = EnvAllowList(parse_env("BILLING_*, REPORTS_TOKEN"))
    assert allowed.allows("BILLING_KEY") and allowed.allows("REPORTS_TOKEN")
    assert not allowed.allows("REPORTS_TOKEN2")
    assert not EnvAllowList(parse_env("*")).allows("PULSE_DATABASE_URL")
    with pytest.raises(InvalidInput):
        parse_env("A-B")


def policy(handlers: str = "", env: str = "", registered: str = "") -> ApiPolicy:
    return ApiPolicy(parse(handlers), EnvAllowList(parse_env(env)), frozenset(registered.split()))


def test_admission_stores_shell_commands_as_argv() -> None:
    allowed = policy("shell:/opt/backup/run *", env="BACKUP_*")
    stored = admit('shell:{"command":"/opt/backup/run nightly","env":["BACKUP_KEY"]}', allowed)
    assert stored == 'shell:{"argv":["/opt/backup/run","nightly"],"env":["BACKUP_KEY"]}'
    with pytest.raises(InvalidInput) as bad:
        admit("shell:/opt/backup/run x;env", allowed)
    assert not isinstance(bad.value, NotAllowed), "malformed: 422"
    with pytest.raises(NotAllowed):
        admit("shell:/opt/backup/run a b", allowed)
    with pytest.raises(NotAllowed) as env:
        admit('shell:{"command":"/opt/backup/run x","env":["HOME"]}', allowed)
    assert "HOME" in env.value.problem


def test_admission_of_python_http_and_celery_handlers() -> None:
    allowed = policy(
        "billing.jobs:rollup,http:https://hooks.example.com/,celery:billing.*",
        env="HOOK_TOKEN",
        registered="reports.jobs:daily",
    )
    assert admit("billing.jobs:rollup", allowed) == "billing.jobs:rollup"
    assert admit("reports.jobs:daily", allowed) == "reports.jobs:daily"
    for refused in ("os:system", "sys:addaudithook", "billing.jobs:other"):
        with pytest.raises(NotAllowed):
            admit(refused, allowed)
    header = (
        'http:{"headers":{"A":"${env:HOOK_TOKEN}"},"method":"POST",'
        '"url":"https://hooks.example.com/"}'
    )
    assert admit(header, allowed) == header
    with pytest.raises(NotAllowed) as secret:
        admit(header.replace("HOOK_TOKEN", "PULSE_DATABASE_URL"), allowed)
    assert "PULSE_DATABASE_URL" in secret.value.problem
    with pytest.raises(NotAllowed):
        admit("http:POST https://hooks.example.com.evil.io/", allowed)
    with pytest.raises(InvalidInput):
        admit("http:POST https://hooks.example.com@evil.io/", allowed)
    assert admit("celery:billing.tasks.run", allowed) == "celery:billing.tasks.run"
    with pytest.raises(NotAllowed):
        admit("celery:reports.run", allowed)


def test_the_limiter_refuses_an_address_past_its_failures_until_they_age_out() -> None:
    limiter = FailureLimiter(max_failures=2, window_s=10)
    limiter.failed("1.2.3.4", now=0)
    assert limiter.retry_after_s("1.2.3.4", now=1) is None
    limiter.failed("1.2.3.4", now=1)
    assert limiter.retry_after_s("1.2.3.4", now=2) == 8
    assert limiter.retry_after_s("5.6.7.8", now=2) is None, "per address"
    assert limiter.retry_after_s("1.2.3.4", now=10.5) is None
