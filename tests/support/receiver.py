"""A real local HTTP receiver for callback tests.

A threaded HTTP/1.1 server (keep-alive) on a random free loopback port. It
records every request (method, path, query, headers, body, arrival time) and
answers each path as configured: status, body, headers and a delay.

    with Receiver() as rx:
        rx.reply("/slow", status=200, delay=2.0)
        ... fire at rx.url("/slow") ...
        [req] = rx.wait_for(1)
        assert req.header("Cronman-Run-Id") == run_id
"""

from __future__ import annotations

import socketserver
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from cronman_bench.limit_figures import max_in_any_second


@dataclass(frozen=True)
class Reply:
    status: int = 204
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


@dataclass(frozen=True)
class ReceivedRequest:
    method: str
    path: str
    query: str
    headers: list[tuple[str, str]]
    body: bytes
    arrived_at: float  # time.time()
    arrived_monotonic: float
    client: tuple[str, int]

    def header(self, name: str, default: str | None = None) -> str | None:
        low = name.lower()
        for key, value in self.headers:
            if key.lower() == low:
                return value
        return default

    def header_all(self, name: str) -> list[str]:
        low = name.lower()
        return [v for k, v in self.headers if k.lower() == low]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 512  # many callbacks connect at once

    def __init__(self, address: tuple[str, int], receiver: Receiver, family: int) -> None:
        self.address_family = family
        self.receiver = receiver
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind does a reverse DNS lookup (getfqdn); skip it.
        socketserver.TCPServer.server_bind(self)
        self.server_name = self.server_address[0]
        self.server_port = self.server_address[1]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass

    def _handle(self) -> None:
        arrived = time.time()
        arrived_mono = time.monotonic()
        body = self._read_body()
        parts = urlsplit(self.path)
        request = ReceivedRequest(
            method=self.command,
            path=parts.path,
            query=parts.query,
            headers=list(self.headers.items()),
            body=body,
            arrived_at=arrived,
            arrived_monotonic=arrived_mono,
            client=self.client_address[:2],
        )
        receiver = self.server.receiver
        reply = receiver._record(request)
        try:
            if reply.delay:
                time.sleep(reply.delay)
        finally:
            receiver._answered(parts.path)  # no longer in flight: the answer goes out now
        try:
            self.send_response(reply.status)
            for key, value in reply.headers.items():
                self.send_header(key, value)
            if reply.status not in (204, 304) and self.command != "HEAD":
                self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            if reply.body and reply.status not in (204, 304) and self.command != "HEAD":
                self.wfile.write(reply.body)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _handle


class Receiver:
    """Records requests and answers them per path; ``start()``/``stop()`` or use as a context."""

    def __init__(
        self, host: str = "127.0.0.1", port: int = 0, default: Reply | None = None
    ) -> None:
        self.host = host
        self._requested_port = port
        self._default = default or Reply()
        self._replies: dict[str, Reply] = {}
        self._requests: list[ReceivedRequest] = []
        self._cond = threading.Condition()
        # Requests between their arrival and their answer: now, and at most so far.
        self.in_flight = 0
        self.max_in_flight = 0
        self._path_in_flight: dict[str, int] = {}
        self._path_max: dict[str, int] = {}
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------

    def start(self) -> Receiver:
        import socket

        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        self._server = _Server((self.host, self._requested_port), self, family)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> Receiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None, "start() the receiver first"
        return self._server.server_address[1]

    def url(self, path: str = "/") -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{path}"

    # -- configuration --------------------------------------------------------

    def reply(
        self,
        path: str,
        status: int = 200,
        body: bytes | str = b"",
        headers: dict[str, str] | None = None,
        delay: float = 0.0,
    ) -> None:
        """Answer requests to ``path`` (query ignored) like this from now on."""
        if isinstance(body, str):
            body = body.encode()
        with self._cond:
            self._replies[path] = Reply(status, body, dict(headers or {}), delay)

    def set_default(self, reply: Reply) -> None:
        with self._cond:
            self._default = reply

    # -- inspection -----------------------------------------------------------

    def _record(self, request: ReceivedRequest) -> Reply:
        with self._cond:
            self._requests.append(request)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            path = request.path
            self._path_in_flight[path] = now = self._path_in_flight.get(path, 0) + 1
            self._path_max[path] = max(self._path_max.get(path, 0), now)
            self._cond.notify_all()
            return self._replies.get(request.path, self._default)

    def _answered(self, path: str) -> None:
        with self._cond:
            self.in_flight -= 1
            self._path_in_flight[path] -= 1

    def max_in_flight_for(self, path: str) -> int:
        """The most requests to ``path`` in flight at once so far."""
        with self._cond:
            return self._path_max.get(path, 0)

    def max_per_second(self, path: str | None = None) -> int:
        """The most requests (to ``path``, or any) that arrived within one
        second of the wall clock (any one-second window, not only whole seconds)."""
        return max_in_any_second(r.arrived_at for r in self.requests
                                 if path is None or r.path == path)

    @property
    def requests(self) -> list[ReceivedRequest]:
        with self._cond:
            return list(self._requests)

    def requests_for(self, path: str) -> list[ReceivedRequest]:
        return [r for r in self.requests if r.path == path]

    def wait_for(
        self, count: int, timeout: float = 5.0, path: str | None = None
    ) -> list[ReceivedRequest]:
        """Block until ``count`` requests (to ``path``, if given) arrived; return them."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                got = [r for r in self._requests if path is None or r.path == path]
                if len(got) >= count:
                    return got
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"expected {count} requests, got {len(got)}")
                self._cond.wait(left)

    def clear(self) -> None:
        with self._cond:
            self._requests.clear()

    def __iter__(self) -> Iterator[ReceivedRequest]:
        return iter(self.requests)
