"""What the HTTP API adds to the ``http:`` and ``celery:`` jobs written through it, on top
of the handler allow-list: the answer of an ``http:`` job is kept as its output only when
the operator opts in (``api.http_body``, ``drop`` by default: a token that may write jobs
must not read what the nodes can reach by way of a run's output), and a ``celery:`` job
names one of the cluster's brokers (``celery.brokers``), never a URL or ``${env:NAME}``,
so a token never chooses where a node connects nor which secret it sends there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from fastapi import Request

from cluster.config import brokers
from cluster.config.egress import API_HTTP_BODY
from cluster.errors import InvalidInput
from cluster.jobs.handlerrefs import CeleryTarget, HttpTarget, is_broker_name, is_forwarded, parse
from cluster.jobs.spec import JobSpec
from cluster.web.state import state_of


def _checked(spec: JobSpec, keep: bool, named: Mapping[str, str], where: str) -> JobSpec:
    if not is_forwarded(spec.handler):
        return spec
    target = parse(spec.handler)
    if isinstance(target, CeleryTarget):
        broker = target.broker
        if broker is None or not is_broker_name(broker) or broker not in named:
            known = ", ".join(named) or f"none: pulse config set {brokers.CELERY_BROKERS} ..."
            raise InvalidInput(
                f"{where}handler.celery.broker",
                f"jobs written through the API name a broker of {brokers.CELERY_BROKERS} "
                f"({known}), never a URL",
            )
        return spec
    if isinstance(target, HttpTarget) and target.keep_body and not keep:
        handler = dataclasses.replace(target, keep_body=False).encode()
        return dataclasses.replace(spec, handler=handler)
    return spec


async def api_targets(request: Request, specs: list[JobSpec], many: bool = False) -> list[JobSpec]:
    """``specs`` as the API stores them; ``InvalidInput`` (422) naming the first bad field."""
    async with state_of(request).pool.store() as store:
        values = await store.config_values()
    keep = values.get(API_HTTP_BODY, "drop") == "keep"
    try:
        named = brokers.parse(values.get(brokers.CELERY_BROKERS, ""))
    except InvalidInput:
        named = {}
    return [
        _checked(spec, keep, named, f"entry {position}: " if many else "")
        for position, spec in enumerate(specs, 1)
    ]
