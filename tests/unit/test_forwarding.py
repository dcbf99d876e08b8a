"""What a node does with a celery: or http: run it cannot carry out: one line naming the
cause (Celery missing, no broker, a secret's variable unset), never the secret's value, and
the attempt fails so retries apply (node/handlers/forwarding.py, node/handlers/celerytask.py)."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from uuid import uuid4

import pytest

from node.handlers.context import RunContext
from node.handlers.forwarding import Forwarders
from node.handlers.invoke import invoke
from node.handlers.python import sync_handler
from node.handlers.threads import HandlerThreads


def context() -> RunContext:
    return RunContext(
        job_id=uuid4(),
        job_name="j",
        tenant_id="default",
        payload={"a": 1},
        scheduled_for=datetime(2026, 1, 1, tzinfo=UTC),
        attempt=1,
        timeout_s=5.0,
        node_id="n1",
        zone="z",
    )


async def test_celery_not_installed_fails_the_attempt_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "celery", None)  # import celery raises ImportError
    outcome = await Forwarders("redis://h").run("celery:app.t", context(), 5.0)
    assert outcome.status == "failed"
    assert outcome.error == "celery is not installed on this node (pip install 'pulsecron[celery]')"


async def test_no_broker_anywhere_fails_the_attempt() -> None:
    outcome = await Forwarders(None).run("celery:app.t", context(), 5.0)
    assert outcome.status == "failed"
    assert outcome.error is not None and "no Celery broker" in outcome.error


async def test_an_unset_broker_variable_is_named_not_resolved(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PULSE_TEST_UNSET_BROKER", raising=False)
    ref = 'celery:{"broker":"${env:PULSE_TEST_UNSET_BROKER}","task":"app.t"}'
    outcome = await Forwarders("redis://:node-secret@h").run(ref, context(), 5.0)
    unset = "PULSE_TEST_UNSET_BROKER"
    assert outcome.error == f"broker: environment variable {unset} is not set on this node"


async def test_a_stored_reference_that_no_longer_parses_fails_the_attempt() -> None:
    outcome = await Forwarders().run("http:FETCH https://e.com", context(), 5.0)
    assert outcome.status == "failed"
    assert outcome.error is not None and outcome.error.startswith("invalid handler: ")


async def test_invoke_hands_forwarded_references_on_and_never_imports_them() -> None:
    threads = HandlerThreads(1)
    assert sync_handler("celery:app.t") is None and sync_handler("http:GET https://e") is None
    outcome = await invoke("http:GET https://e.com", context(), 5.0, threads)
    assert outcome.status == "failed" and outcome.error == "http: handlers are not set up here"
    threads.shutdown()
