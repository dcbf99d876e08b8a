"""Traces: one OpenTelemetry span per attempt, every attempt of a slot in one trace.

The trace id is derived from (job id, slot), so the attempt lost with its node, the span
the recovering node writes for that loss, and the retry on another node share one trace
without any node telling another. Each attempt's span is the child of a slot span that is
never exported (its id is derived the same way), and its ``traceparent`` (W3C) is handed
to the handler: ``ctx.traceparent``, an ``http:`` request's header, a Celery task's
headers, a shell command's ``TRACEPARENT``.

OpenTelemetry is an optional extra (``pulsecron[otel]``): this module imports it only
when a node is started with ``--otel``, and a node without the flag builds no ``Tracing``,
so a fire pays nothing for it. The SDK is configured by the standard ``OTEL_*`` variables
(endpoint, headers, service name, batch delays). Why so: docs/design/inputs.md.
"""

from __future__ import annotations

import hashlib
import logging
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from cluster.errors import ConfigError
from cluster.jobs.models import RunStatus
from cluster.store.lock.records import ClaimedJob

if TYPE_CHECKING:
    from opentelemetry.trace import Span

logger = logging.getLogger(__name__)

__all__ = ["Tracing", "slot_ids", "traceparent_of"]

SCOPE = "pulse"


def slot_ids(job_id: UUID, slot: datetime) -> tuple[int, int]:
    """The trace id (128 bits) and the slot span's id (64 bits) of (job, slot): the same in
    every process, never zero."""
    key = f"{job_id}:{slot.astimezone(UTC).isoformat()}".encode()
    digest = hashlib.blake2b(key, digest_size=24, person=b"pulse-trace").digest()
    trace_id = int.from_bytes(digest[:16], "big") or 1
    span_id = int.from_bytes(digest[16:], "big") or 1
    return trace_id, span_id


def traceparent_of(trace_id: int, span_id: int) -> str:
    """The W3C ``traceparent`` header of a sampled span."""
    return f"00-{trace_id:032x}-{span_id:016x}-01"


def _attributes(job: ClaimedJob, node: str | None, zone: str | None) -> dict[str, Any]:
    found = {
        "pulse.job": job.name,
        "pulse.job_id": str(job.id),
        "pulse.tenant": job.tenant,
        "pulse.slot": job.slot.isoformat(),
        "pulse.attempt": job.attempt,
        "pulse.origin": job.origin or "schedule",
        "pulse.fencing_token": job.lease_token,
    }
    if node is not None:
        found["pulse.node"] = node
    if zone is not None:
        found["pulse.zone"] = zone
    return found


class Tracing:
    """The node's tracer: spans of attempts in flight, keyed by (job, slot, token)."""

    def __init__(self, node_id: str, zone: str) -> None:
        try:
            from opentelemetry import trace
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError as exc:
            raise ConfigError("--otel needs OpenTelemetry: pip install 'pulsecron[otel]'") from exc
        self.node_id = node_id
        self.zone = zone
        self._trace = trace  # the API module, imported once: a span costs no import lookup
        self._sampled = trace.TraceFlags(trace.TraceFlags.SAMPLED)
        resource = Resource.create({"service.name": "pulse", "service.instance.id": node_id})
        self._provider = TracerProvider(resource=resource)  # OTEL_SERVICE_NAME overrides
        self._provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        self._tracer = self._provider.get_tracer(SCOPE)
        self._spans: dict[tuple[UUID, datetime, int], Span] = {}
        logger.info(
            "tracing every attempt: OpenTelemetry spans over OTLP/HTTP (OTEL_* settings)",
            extra={"event": "tracing_on"},
        )

    def _parent(self, job: ClaimedJob) -> Any:
        trace = self._trace
        trace_id, span_id = slot_ids(job.id, job.slot)
        slot_span = trace.SpanContext(trace_id, span_id, is_remote=True, trace_flags=self._sampled)
        return trace.set_span_in_context(trace.NonRecordingSpan(slot_span))

    def _error(self, span: Span, text: str) -> None:
        span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, text[:200]))

    def start(self, job: ClaimedJob) -> str:
        """Open the span of the attempt ``job`` begins; its ``traceparent``."""
        span = self._tracer.start_span(
            f"pulse run {job.name}",
            context=self._parent(job),
            attributes=_attributes(job, self.node_id, self.zone),
        )
        self._spans[(job.id, job.slot, job.lease_token)] = span
        found = span.get_span_context()
        return traceparent_of(found.trace_id, found.span_id)

    def end(self, job: ClaimedJob, status: str, error: str | None = None) -> None:
        """Close the attempt's span with its outcome (a no-op if it has none)."""
        span = self._spans.pop((job.id, job.slot, job.lease_token), None)
        if span is None:
            return
        span.set_attribute("pulse.status", status)
        if status != RunStatus.SUCCEEDED:
            self._error(span, error or status)
        span.end()

    def lost(self, job: ClaimedJob, attempt: int, node: str | None, reason: str) -> None:
        """The span of an attempt lost with its node, written by the node that took the
        slot back: in the slot's trace, with the lost node's name."""
        span = self._tracer.start_span(
            f"pulse run {job.name}",
            context=self._parent(job),
            attributes={
                **_attributes(job._replace(attempt=attempt), node, None),
                "pulse.status": "lost",
                "pulse.recovered_by": self.node_id,
            },
            start_time=time.time_ns(),
        )
        self._error(span, f"lost: {reason}")
        span.end()

    def fenced(self, job: ClaimedJob) -> None:
        """A fenced write: this node's result for an attempt whose lease had moved on."""
        span = self._tracer.start_span(
            f"pulse fenced write {job.name}",
            context=self._parent(job),
            attributes={**_attributes(job, self.node_id, self.zone), "pulse.status": "fenced"},
        )
        span.end()

    def shutdown(self) -> None:
        """Export what is left (the batch processor's queue), then stop."""
        self._provider.shutdown()
