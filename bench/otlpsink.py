"""``python -m bench.otlpsink PORT``: an OTLP/HTTP endpoint that reads each export request
and answers 200, for ``python -m bench --otel`` (nodes that trace, measured against nodes
that do not). It decodes nothing: its CPU is not the nodes'."""

from __future__ import annotations

import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Sink(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink).serve_forever()
