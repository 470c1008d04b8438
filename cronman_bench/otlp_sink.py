"""A real OTLP/HTTP trace receiver for the tracing scenario, in a process of its own.

    python -m cronman_bench.otlp_sink --port P --log FILE

It answers ``POST /v1/traces`` (protobuf ``ExportTraceServiceRequest``, what
the SDK's OTLP/HTTP exporter sends) as a collector does, decodes each
request (opentelemetry-proto, a dependency of the exporter), and appends a
line per request to FILE: its arrival (Unix ms) and its spans counted by the
second they started in (``<ms> <second>:<count>,...``); ``read_log`` sums
the spans started in a window, whenever they were exported (the nodes flush
what is left when they stop).
"""

from __future__ import annotations

import argparse
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def read_log(path: Path, start_ms: int, end_ms: int) -> tuple[int, int]:
    """(export requests, spans) of the spans started in whole seconds of [start_ms, end_ms)."""
    requests = spans = 0
    try:
        text = path.read_text()
    except FileNotFoundError:
        return 0, 0
    first, last = -(-start_ms // 1000), end_ms // 1000  # the whole seconds inside
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 2:
            continue
        requests += 1
        for bucket in parts[1].split(","):
            second, _, count = bucket.partition(":")
            if first <= int(second) < last:
                spans += int(count)
    return requests, spans


def serve(port: int, log_path: Path) -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
        ExportTraceServiceResponse,
    )

    answer = ExportTraceServiceResponse().SerializeToString()
    lock = threading.Lock()
    log = open(log_path, "a", buffering=1, encoding="ascii")  # noqa: SIM115 - for the process

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as a collector

        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.path != "/v1/traces":
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            request = ExportTraceServiceRequest.FromString(body)
            seconds = Counter(span.start_time_unix_nano // 1_000_000_000
                              for rs in request.resource_spans for scope in rs.scope_spans
                              for span in scope.spans)
            buckets = ",".join(f"{s}:{n}" for s, n in sorted(seconds.items())) or "0:0"
            with lock:
                log.write(f"{int(time.time() * 1000)} {buckets}\n")
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    print(f"otlp sink on http://127.0.0.1:{port}", flush=True)
    server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log", type=Path, required=True)
    args = parser.parse_args()
    serve(args.port, args.log)


if __name__ == "__main__":
    main()
