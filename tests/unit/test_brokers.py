"""Celery brokers by name (cluster/config/brokers.py) and kept bodies in http: references:
``celery.brokers`` checked at ``config set`` (no literal password), a job naming a broker,
the node resolving the name at run time, and ``keep_body`` in the canonical text."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import uuid4

import pytest

from cluster.config.keys import canonical as config_canonical
from cluster.errors import InvalidInput
from cluster.jobs.handlerrefs import CeleryTarget, HttpTarget, canonical, describe, parse
from node.handlers.context import RunContext
from node.handlers.forwarding import Forwarders


def test_brokers_are_stored_by_name() -> None:
    text = " main = ${env:CELERY_MAIN_URL} , reports=redis://broker:6379/1,"
    stored = config_canonical("celery.brokers", text)
    assert stored == "main=${env:CELERY_MAIN_URL},reports=redis://broker:6379/1"
    assert config_canonical("celery.brokers", "") == ""
    assert config_canonical("celery.brokers", "x=redis://:${env:PW}@b:6379/0").endswith("@b:6379/0")


@pytest.mark.parametrize(
    "text",
    [
        "main=redis://:hunter2@broker:6379/0",
        "main=amqp://user:p%40ss@rabbit//",
        "redis://broker:6379/0",
        "main=redis://b/0,main=redis://c/0",
        "1main=redis://b/0",
        "main=broker-without-scheme",
    ],
)
def test_bad_brokers_are_refused_naming_the_key_and_no_password(text: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        config_canonical("celery.brokers", text)
    assert caught.value.field == "celery.brokers"
    assert "hunter2" not in str(caught.value) and "p%40ss" not in str(caught.value)


def test_a_job_names_a_broker() -> None:
    stored = canonical({"celery": {"task": "app.t", "broker": "main"}})
    assert stored == 'celery:{"broker":"main","task":"app.t"}'
    target = parse(stored)
    assert isinstance(target, CeleryTarget) and target.broker == "main"
    assert "broker main (celery.brokers)" in describe(stored)


def test_keep_body_is_left_out_of_the_canonical_text_when_true() -> None:
    url = "https://example.com/hook"
    assert canonical({"http": {"url": url, "keep_body": True}}) == f"http:POST {url}"
    dropped = canonical({"http": {"url": url, "keep_body": False}})
    assert dropped == f'http:{{"keep_body":false,"method":"POST","url":"{url}"}}'
    target = parse(dropped)
    assert isinstance(target, HttpTarget) and target.keep_body is False
    assert "the answer's body is not kept" in describe(dropped)
    with pytest.raises(InvalidInput) as caught:
        canonical({"http": {"url": url, "keep_body": "no"}})
    assert caught.value.field == "handler.http.keep_body"


def context() -> RunContext:
    return RunContext(
        job_id=uuid4(),
        job_name="j",
        tenant_id="default",
        payload={},
        scheduled_for=datetime(2026, 1, 1, tzinfo=UTC),
        attempt=1,
        timeout_s=5.0,
        node_id="n1",
        zone="z",
    )


async def test_the_node_resolves_a_broker_name_from_the_config_at_run_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PULSE_TEST_UNSET_BROKER", raising=False)
    config = {"celery.brokers": "main=${env:PULSE_TEST_UNSET_BROKER}"}

    async def source() -> dict[str, str]:
        return config

    forwarders = Forwarders(None, source)
    ref = 'celery:{"broker":"main","task":"app.t"}'
    outcome = await forwarders.run(ref, context(), 5.0)
    # the name was found; its URL's variable is what is missing on this node
    assert (
        outcome.error
        == "broker: environment variable PULSE_TEST_UNSET_BROKER is not set on this node"
    )
    outcome = await forwarders.run('celery:{"broker":"other","task":"app.t"}', context(), 5.0)
    assert outcome.status == "failed"
    assert outcome.error == "broker 'other' is not in celery.brokers (pulse config set ...)"
