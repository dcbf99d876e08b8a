"""Running a ``celery:`` handler: send the task by name to its broker, so Pulse can replace
Celery beat.

The run's payload becomes the task's keyword arguments and its idempotency key the task id,
so a retried slot sends the same id. The attempt succeeds once the broker accepted the
message; with ``wait`` it waits (within the timeout) for the task's result, read from the
broker used as result backend, and fails if the task failed. Celery's client is sync: each
send or wait runs in a worker thread (``asyncio.to_thread``), never on the loop. One Celery
app is kept per broker URL. A broker given by name is looked up in the cluster's
``celery.brokers`` at run time. The broker URL (job, name or node, ``${env:NAME}`` resolved
here) appears in no error or log line, nor its password in any spelling
(``node.handlers.scrubbing``). Celery is the optional extra ``pulsecron[celery]``.
Guarded by tests/e2e/test_celery_handler.py.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import threading
import time
from collections.abc import Mapping
from typing import Any

from cluster.config.brokers import CELERY_BROKERS
from cluster.jobs.handlerrefs import (
    CELERY_BROKER_ENV,
    CeleryTarget,
    MissingSecret,
    is_broker_name,
    resolve,
)
from cluster.settings import mask_url
from node.handlers.context import Outcome, RunContext, finished, timed_out
from node.handlers.scrubbing import scrub, url_secrets

PUBLISH_RETRIES = 2


class CeleryApps:
    """One Celery app per broker URL, made on first use (thread-safe)."""

    def __init__(self, default_broker: str | None) -> None:
        self.default_broker = default_broker
        self._apps: dict[str, Any] = {}
        self._lock = threading.Lock()

    def app(self, url: str) -> Any:
        with self._lock:
            found = self._apps.get(url)
            if found is None:
                celery = importlib.import_module("celery")
                backend = _backend(url)
                found = celery.Celery("pulse", broker=url, backend=backend, set_as_current=False)
                found.conf.task_publish_retry_policy = {
                    "max_retries": PUBLISH_RETRIES,
                    "interval_start": 0.2,
                    "interval_step": 0.5,
                }
                found.conf.broker_connection_timeout = 5.0
                self._apps[url] = found
            return found

    def close(self) -> None:
        with self._lock:
            apps, self._apps = list(self._apps.values()), {}
        for app in apps:
            app.close()


def _backend(url: str) -> str:
    """Where ``wait`` reads results: the broker itself, or RPC replies over AMQP."""
    return "rpc://" if url.startswith(("amqp:", "amqps:", "pyamqp:")) else url


def _scrub(text: str, url: str) -> str:
    """``text`` with the URL masked and its password hidden in every spelling."""
    if not url:
        return text
    return scrub(text.replace(url, mask_url(url)), url_secrets(url))


def _send(app: Any, target: CeleryTarget, ctx: RunContext) -> Any:
    # The attempt's span (--otel) in the message headers, where OpenTelemetry's Celery
    # instrumentation reads it; without tracing, the call is as it always was.
    traced = {} if ctx.traceparent is None else {"headers": {"traceparent": ctx.traceparent}}
    return app.send_task(
        target.task,
        kwargs=dict(ctx.payload),
        task_id=ctx.idempotency_key,
        queue=target.queue,
        ignore_result=not target.wait,  # else the backend subscribes to every result
        **traced,
    )


def _wait(result: Any, left_s: float) -> tuple[str, Any]:
    value = result.get(timeout=left_s, propagate=False)
    return str(result.state), value


async def run_celery(
    apps: CeleryApps,
    target: CeleryTarget,
    ctx: RunContext,
    timeout_s: float,
    brokers: Mapping[str, str] | None = None,
) -> Outcome:
    """``brokers``: the cluster's ``celery.brokers``, names to URLs."""
    started = time.monotonic()
    try:
        importlib.import_module("celery")
    except ImportError:
        error = "celery is not installed on this node (pip install 'pulsecron[celery]')"
        return Outcome("failed", error, 0.0)
    reference = target.broker or apps.default_broker
    if not reference:
        error = f"no Celery broker: the job names none and the node has no {CELERY_BROKER_ENV}"
        return Outcome("failed", error, 0.0)
    if is_broker_name(reference):
        named = (brokers or {}).get(reference)
        if named is None:
            error = f"broker {reference!r} is not in {CELERY_BROKERS} (pulse config set ...)"
            return Outcome("failed", error, 0.0)
        reference = named
    try:
        url = resolve(reference, os.environ)
    except MissingSecret as exc:
        error = f"broker: environment variable {exc.name} is not set on this node"
        return Outcome("failed", error, 0.0)
    try:
        async with asyncio.timeout(timeout_s):
            app = apps.app(url)
            sent = await asyncio.to_thread(_send, app, target, ctx)
            if not target.wait:
                result = {"task_id": sent.id, "sent": True}
                return finished(ctx, None, time.monotonic() - started, result)
            left_s = max(0.01, timeout_s - (time.monotonic() - started))
            state, value = await asyncio.to_thread(_wait, sent, left_s)
    except TimeoutError:
        return timed_out(ctx, timeout_s, time.monotonic() - started)
    except Exception as exc:  # the broker's client may raise anything
        text = _scrub(f"celery {target.task}: {type(exc).__name__}: {exc}", url)
        if "TimeoutError" in type(exc).__name__:  # the result did not come in time
            return timed_out(ctx, timeout_s, time.monotonic() - started)
        return Outcome("failed", text[:2000], time.monotonic() - started)
    duration = time.monotonic() - started
    if state != "SUCCESS":
        text = _scrub(f"celery task {target.task} ended {state}: {value!r}", url)
        return Outcome("failed", text[:2000], duration)
    return finished(ctx, None, duration, {"task_id": ctx.idempotency_key, "result": value})
