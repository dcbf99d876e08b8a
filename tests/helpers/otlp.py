"""A real OTLP/HTTP trace receiver, run as a process of its own for end-to-end tests.

``python -m tests.helpers.otlp PORT FILE`` answers ``POST /v1/traces`` as a collector does,
decodes each protobuf ``ExportTraceServiceRequest`` (opentelemetry-proto) and appends every
span to FILE as a JSON line: ids in hex, name, attributes, status, and the resource's
``service.instance.id``. ``OtlpReceiver`` starts it, reads the spans and stops it.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cluster.local.processes import free_port
from tests.helpers import REPO
from tests.helpers.waiting import until


def _value(found: Any) -> Any:
    kind = found.WhichOneof("value")
    return None if kind is None else getattr(found, kind)


def decode(body: bytes) -> list[dict[str, Any]]:
    """The spans of one export request, as plain data."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans = []
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    {
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(),
                        "name": span.name,
                        "attributes": {a.key: _value(a.value) for a in span.attributes},
                        "status": span.status.code,
                        "instance": resource.get("service.instance.id"),
                    }
                )
    return spans


def serve(port: int, out: Path) -> None:
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path != "/v1/traces":
                self.send_response(404)
                self.end_headers()
                return
            spans = decode(body)
            with lock, out.open("a") as file:
                for span in spans:
                    file.write(json.dumps(span) + "\n")
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


@dataclass
class OtlpReceiver:
    """The receiver process; ``endpoint`` is what OTEL_EXPORTER_OTLP_TRACES_ENDPOINT takes."""

    out: Path
    port: int = field(default_factory=free_port)
    _proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/traces"

    def __enter__(self) -> OtlpReceiver:
        self.out.touch()
        argv = [sys.executable, "-m", "tests.helpers.otlp", str(self.port), str(self.out)]
        self._proc = subprocess.Popen(argv, cwd=REPO)
        until(self._listening, "the OTLP receiver to listen", 15)
        return self

    def _listening(self) -> bool:
        import socket

        assert self._proc is not None
        if self._proc.poll() is not None:
            raise AssertionError(f"the OTLP receiver exited with {self._proc.returncode}")
        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", self.port)) == 0

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait(10)

    def spans(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.out.read_text().splitlines() if line]


if __name__ == "__main__":
    serve(int(sys.argv[1]), Path(sys.argv[2]))
