"""Traces end to end: real nodes started with ``--otel`` export over OTLP/HTTP to a real
receiver process, which decodes the protobuf requests. The node running a slot is
SIGKILLed mid-run; the span the recovering node writes for the lost attempt and the span
of the retry on the other node share one trace id, the one derived from (job, slot), and
the retry's handler was given its span as ``ctx.traceparent``."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import pytest

from cluster.jobs.models import Job
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from node.handlers.traces import slot_ids
from tests.helpers.fleet import Fleet
from tests.helpers.nodes import init_cluster
from tests.helpers.otlp import OtlpReceiver
from tests.helpers.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def attempts(folder: Path) -> list[dict[str, Any]]:
    found = folder / "attempts.jsonl"
    return [json.loads(x) for x in found.read_text().splitlines()] if found.exists() else []


async def trigger(settings: ClusterSettings) -> Job:
    async with JobStore.open(settings) as store:
        return await store.trigger("traced")


def test_a_slot_lost_with_its_node_and_its_retry_are_one_trace(
    fleet: Fleet, settings: ClusterSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    handler = "tests.e2e.trace_handlers:slow_first"
    spec = JobSpec.build("traced", "@daily", handler, payload={"dir": str(tmp_path)}, retries=2)
    init_cluster(settings, spec)
    with OtlpReceiver(tmp_path / "spans.jsonl") as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.endpoint)
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")  # the nodes inherit both
        monkeypatch.setenv("OTEL_SERVICE_NAME", "pulse-e2e")
        for node_id, zone in (("n1", "a"), ("n2", "b")):
            fleet.start(node_id, zone, "--otel")
        job = asyncio.run(trigger(settings))
        (first,) = until(lambda: attempts(tmp_path), "the first attempt to start", 30)
        fleet.node(first["node"]).signal(signal.SIGKILL)  # mid-run
        survivor = "n2" if first["node"] == "n1" else "n1"
        until(lambda: len(attempts(tmp_path)) == 2, "the retry to start", 60)
        second = attempts(tmp_path)[1]
        assert (second["attempt"], second["node"]) == (2, survivor)

        def both() -> list[dict[str, Any]]:
            spans = [s for s in receiver.spans() if s["attributes"].get("pulse.job") == "traced"]
            done = [s for s in spans if s["attributes"].get("pulse.status") == "succeeded"]
            return spans if done else []

        spans = until(both, "the retry's span to be exported", 60)
    trace_id, slot_span = slot_ids(job.id, job.slot_at)
    lost = [s for s in spans if s["attributes"]["pulse.status"] == "lost"]
    ran = [s for s in spans if s["attributes"]["pulse.status"] == "succeeded"]
    assert len(lost) == 1 and len(ran) == 1, spans
    for span in (*lost, *ran):
        assert span["trace_id"] == f"{trace_id:032x}", "one trace per (job, slot)"
        assert span["parent_span_id"] == f"{slot_span:016x}"
        assert span["attributes"]["pulse.slot"] == job.slot_at.isoformat()
        assert span["instance"] == survivor, "both written by the node that is alive"
    (lost_span,) = lost
    (ran_span,) = ran
    assert lost_span["attributes"]["pulse.attempt"] == 1
    assert lost_span["attributes"]["pulse.node"] == first["node"]
    assert lost_span["attributes"]["pulse.origin"] == "trigger"
    assert ran_span["attributes"]["pulse.attempt"] == 2
    assert ran_span["attributes"]["pulse.node"] == survivor
    assert ran_span["attributes"]["pulse.origin"] == "trigger"
    assert ran_span["attributes"]["pulse.tenant"] == "default"
    assert ran_span["attributes"]["pulse.zone"] in ("a", "b")
    assert isinstance(ran_span["attributes"]["pulse.fencing_token"], int)
    assert second["traceparent"] == f"00-{trace_id:032x}-{ran_span['span_id']}-01"
    assert first["traceparent"].startswith(f"00-{trace_id:032x}-")
