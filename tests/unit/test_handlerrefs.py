"""http: and celery: handler references: parsing, the stored canonical text, validation,
secrets that stay references, and what ``pulse jobs show`` prints (cluster/jobs/handlerrefs.py)."""

from __future__ import annotations

from typing import Any

import pytest

from cluster.errors import InvalidInput
from cluster.jobs.handlerrefs import (
    CeleryTarget,
    HttpTarget,
    MissingSecret,
    canonical,
    describe,
    parse,
    require_broker,
    resolve,
    with_celery_options,
)
from cluster.jobs.masking import shown
from cluster.jobs.spec import JobSpec


def test_the_short_forms_stay_short() -> None:
    assert canonical("http:post  https://example.com/hook") == "http:POST https://example.com/hook"
    assert canonical("celery:app.tasks.rollup") == "celery:app.tasks.rollup"
    for ref in ("app.jobs:tick", "shell:echo hi"):
        assert canonical(ref) == ref


def test_a_mapping_becomes_canonical_json_that_parses_back() -> None:
    stored = canonical(
        {
            "http": {
                "method": "put",
                "url": "https://example.com/x",
                "headers": {"X-B": "2", "Authorization": "Bearer ${env:TOKEN}"},
                "body": {"a": [1, 2]},
                "ok_status": [204, "200-201"],
                "timeout": "5s",
            }
        },
        timeout_s=10,
    )
    assert stored.startswith('http:{"body"')
    assert canonical(stored) == stored  # idempotent: jobs apply compares stored text
    target = parse(stored)
    assert isinstance(target, HttpTarget)
    assert target.method == "PUT" and target.body == {"a": [1, 2]} and target.has_body
    assert target.headers == (("Authorization", "Bearer ${env:TOKEN}"), ("X-B", "2"))
    assert target.ok_status == ((200, 201), (204, 204))
    assert target.timeout_s == 5.0
    assert [target.accepts(s) for s in (200, 201, 202, 204)] == [True, True, False, True]


def test_defaults_left_out_give_the_short_form() -> None:
    assert canonical({"http": {"url": "https://e.com/a"}}) == "http:POST https://e.com/a"
    assert canonical({"http": {"url": "https://e.com/a", "ok_status": "200-299"}}) == (
        "http:POST https://e.com/a"
    )
    assert canonical({"celery": {"task": "t.x", "wait": False}}) == "celery:t.x"


def test_celery_mapping_and_cli_options() -> None:
    stored = canonical({"celery": {"task": "app.t", "broker": "${env:B}", "wait": True}})
    target = parse(stored)
    assert target == CeleryTarget("app.t", "${env:B}", True, None)
    cli = with_celery_options("celery:app.t", "${env:B}", True)
    assert parse(cli) == target
    assert with_celery_options("celery:app.t", None, False) == "celery:app.t"
    with pytest.raises(InvalidInput, match="celery-broker"):
        with_celery_options("shell:x", None, True)


REFUSED = ["Host", "forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Real-IP", "Via",
           "Proxy-Authorization", "Connection", "TE", "Upgrade", "Content-Length",
           "Transfer-Encoding"]  # fmt: skip
BAD: list[tuple[Any, str]] = [
    ("http:FETCH https://e.com", "handler.http.method"),
    ("http:POST ftp://e.com/x", "handler.http.url"),
    ("http:POST e.com/x", "handler.http.url"),
    ("http:POST", "handler.http.url"),
    ({"http": {"url": "https://e.com", "ok_status": "abc"}}, "handler.http.ok_status"),
    ({"http": {"url": "https://e.com", "ok_status": "600"}}, "handler.http.ok_status"),
    ({"http": {"url": "https://e.com", "ok_status": "299-200"}}, "handler.http.ok_status"),
    ({"http": {"url": "https://e.com", "ok_status": [True]}}, "handler.http.ok_status"),
    ({"http": {"url": "https://e.com", "headers": {"bad name": "x"}}}, "handler.http.headers"),
    ({"http": {"url": "https://e.com", "headers": {"A": "x\ny"}}}, "handler.http.headers.A"),
    *[
        ({"http": {"url": "https://e.com", "headers": {name: "x"}}}, "handler.http.headers")
        for name in REFUSED
    ],
    ({"http": {"url": "https://e.com", "timeout": "1h"}}, "handler.http.timeout"),
    ({"http": {"url": "https://e.com", "colour": "red"}}, "handler.http.colour"),
    ({"http": "https://e.com"}, "handler.http"),
    ({"ftp": {"url": "x"}}, "handler"),
    ("celery:", "handler.celery.task"),
    ("celery:   ", "handler.celery.task"),
    ({"celery": {"task": ""}}, "handler.celery.task"),
    ({"celery": {"task": "a b"}}, "handler.celery.task"),
    ({"celery": {"task": "t", "wait": "yes"}}, "handler.celery.wait"),
    ({"celery": {"task": "t", "broker": "host/0"}}, "handler.celery.broker"),
    (5, "handler"),
]


@pytest.mark.parametrize(("handler", "field"), BAD, ids=[f"{f}:{h!r:.30}" for h, f in BAD])
def test_bad_handlers_are_refused_naming_the_field(handler: Any, field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        JobSpec.build("j", "@daily", handler, timeout="10m")
    assert caught.value.field == field


def test_a_job_file_mapping_goes_through_from_mapping() -> None:
    spec = JobSpec.from_mapping(
        {"name": "a", "schedule": "@daily", "handler": {"http": {"url": "https://e.com"}}}
    )
    assert spec.handler == "http:POST https://e.com"
    assert spec.validated() == spec


def test_secrets_resolve_from_the_environment_only_at_run_time() -> None:
    assert resolve("Bearer ${env:TOKEN}", {"TOKEN": "s3"}) == "Bearer s3"
    assert resolve("plain", {}) == "plain"
    with pytest.raises(MissingSecret) as caught:
        resolve("Bearer ${env:TOKEN}", {})
    assert caught.value.name == "TOKEN"


def test_a_broker_password_is_masked_wherever_a_job_is_shown() -> None:
    stored = canonical({"celery": {"task": "t.x", "broker": "redis://:hunter2@h:6379/1"}})
    assert "hunter2" in stored  # a literal URL is what the user asked to store
    assert "hunter2" not in shown(stored)
    assert all("hunter2" not in line for line in describe(stored))
    assert describe("celery:t.x")[1].startswith("broker the node default")


def test_describe_lists_http_options() -> None:
    stored = canonical(
        {"http": {"url": "https://e.com", "headers": {"A": "${env:X}"}, "ok_status": 204}}
    )
    assert describe(stored) == [
        "http:POST https://e.com",
        "header A: ${env:X}",
        "ok_status 204",
    ]
    assert describe("app.jobs:tick") == ["app.jobs:tick"]


def test_require_broker_reads_the_job_then_the_environment() -> None:
    with pytest.raises(InvalidInput, match="PULSE_CELERY_BROKER"):
        require_broker("celery:t.x", {})
    require_broker("celery:t.x", {"PULSE_CELERY_BROKER": "redis://h"})
    require_broker(canonical({"celery": {"task": "t", "broker": "${env:B}"}}), {})
    require_broker("shell:x", {})
