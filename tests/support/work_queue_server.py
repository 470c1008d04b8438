"""A small real HTTP server speaking the three worker calls' wire contract, for UNIT tests only.

``POST /v1/queues/{queue}/claim``, ``POST /v1/runs/{id}/heartbeat`` and
``POST /v1/runs/{id}/complete`` as SPEC §5 gives them (200 / 204, 409
``stale_lease``; the worker's id kept in a completed run's result, as the API
does), and ``GET /v1/runs/{id}``, over a real socket on 127.0.0.1, with an in-memory queue:
a lease that gets no heartbeat within ``heartbeat_timeout`` is taken back
and the run queued again as the next attempt (its old token refused from
then on). It stands in for the cronman API only in tests of the client's
``Worker`` and of ``cronman worker``; the end-to-end tests run the real API.

Faults for the tests: ``fail_next(path_part, n, status)`` answers the next
``n`` matching requests with ``status`` (503, say) before handling any;
``drop_answers(path_part, n)`` handles them and closes the connection
without an answer.
"""

from __future__ import annotations

import json
import secrets
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DROP = 0  # a status meaning: close the connection without an answer


@dataclass
class Item:
    run_id: str
    job_id: str
    queue: str
    namespace: str
    payload: Any
    heartbeat_timeout: float
    timeout: float
    attempt: int = 1
    token: str | None = None
    worker_id: str | None = None
    lease_expires: float = 0.0
    deadline: float = 0.0
    cancel_requested: bool = False
    status: str = "queued"  # queued | held | succeeded | failed
    result: dict[str, Any] | None = None
    error: str | None = None
    heartbeats: list[dict[str, Any]] = field(default_factory=list)
    completions: list[dict[str, Any]] = field(default_factory=list)
    scheduled_for: str = "2026-12-01T00:00:00Z"

    def run_json(self) -> dict[str, Any]:
        return {"id": self.run_id, "job_id": self.job_id, "scheduled_for": self.scheduled_for,
                "status": {"queued": "running", "held": "running"}.get(self.status,
                                                                       self.status),
                "attempt": self.attempt, "error": self.error,
                # As the API: the reporting worker's id is kept in the result.
                "result": None if self.status in ("queued", "held") else
                {**(self.result or {}), "worker_id": self.worker_id}}


class WorkQueueServer:
    """The in-memory queues and the HTTP server over them."""

    def __init__(self, token: str | None = None) -> None:
        self.token = token
        self.items: dict[str, Item] = {}
        self.claims: list[dict[str, Any]] = []  # every claim request's body
        self.refused: list[tuple[str, str]] = []  # (path, token) answered 409
        self.max_wait = 30.0  # 0: no long-poll to spare (a claim answers at once)
        self._faults: list[list[Any]] = []
        self._drops: list[list[Any]] = []
        self._cond = threading.Condition()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 (and GET /v1/runs/{id})
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                status, answer = outer.handle(self.path, body,
                                              self.headers.get("Authorization"))
                if status == DROP:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                data = b"" if answer is None else json.dumps(answer).encode()
                try:
                    self.send_response(status)
                    if answer is not None:
                        self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the worker went away (a test killed it)

            do_GET = do_POST

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    # -- test side -------------------------------------------------------------

    def enqueue(self, payload: Any = None, *, queue: str = "q", namespace: str = "default",
                heartbeat_timeout: float = 2.0, timeout: float = 60.0) -> Item:
        item = Item(str(uuid.uuid4()), str(uuid.uuid4()), queue, namespace, payload,
                    heartbeat_timeout, timeout)
        with self._cond:
            self.items[item.run_id] = item
            self._cond.notify_all()
        return item

    def cancel(self, run_id: str) -> None:
        with self._cond:
            self.items[run_id].cancel_requested = True

    def drop_answers(self, path_part: str, n: int) -> None:
        """The next ``n`` matching requests are handled, but the connection is closed
        instead of answering (a write applied whose answer was lost)."""
        with self._cond:
            self._drops.append([path_part, n])

    def _drop_answer(self, path: str) -> bool:
        for drop in self._drops:
            if drop[0] in path and drop[1] > 0:
                drop[1] -= 1
                return True
        return False

    def fail_next(self, path_part: str, n: int, status: int = 503) -> None:
        with self._cond:
            self._faults.append([path_part, n, status])

    def wait_for(self, check: Any, timeout: float = 10.0) -> None:
        """Until ``check()`` holds (leases past their time taken back meanwhile)."""
        deadline = time.monotonic() + timeout
        while True:
            with self._cond:
                self._expire()
            if check():
                return
            if time.monotonic() > deadline:
                raise AssertionError("timed out waiting on the work queue server")
            time.sleep(0.02)

    # -- the calls -------------------------------------------------------------

    def handle(self, path: str, body: dict[str, Any],
               auth: str | None) -> tuple[int, dict[str, Any] | None]:
        if self.token and auth != f"Bearer {self.token}":
            return 401, _error("unauthenticated", "a valid token is needed")
        with self._cond:
            for fault in self._faults:
                if fault[0] in path and fault[1] > 0:
                    fault[1] -= 1
                    return fault[2], _error("unavailable", "injected fault")
        parts = path.strip("/").split("/")
        if parts[:2] == ["v1", "queues"] and parts[3:] == ["claim"]:
            return self._claim(parts[2], body)
        if parts[:2] == ["v1", "runs"] and parts[3:] == ["heartbeat"]:
            return self._heartbeat(parts[2], body)
        if parts[:2] == ["v1", "runs"] and parts[3:] == ["complete"]:
            return self._complete(parts[2], body)
        if parts[:2] == ["v1", "runs"] and len(parts) == 3 and parts[2] in self.items:
            return 200, self.items[parts[2]].run_json()
        return 404, _error("not_found", f"no {path}")

    def _claim(self, queue: str,
               body: dict[str, Any]) -> tuple[int, dict[str, Any] | None]:
        if not body.get("worker_id"):
            return 400, _error("invalid", "worker_id is required", "worker_id")
        deadline = time.monotonic() + min(float(body.get("wait", 20)), self.max_wait)
        namespace = body.get("namespace", "default")
        with self._cond:
            self.claims.append(body)
            while True:
                self._expire()
                item = next((i for i in self.items.values() if i.status == "queued"
                             and i.queue == queue and i.namespace == namespace), None)
                if item is not None:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    return 204, None
                self._cond.wait(min(left, 0.05))
            most = body.get("max")
            taken = [i for i in self.items.values() if i.status == "queued"
                     and i.queue == queue and i.namespace == namespace][:most or 1]
            now = time.monotonic()
            claims = []
            for item in taken:
                item.status, item.token, item.worker_id = "held", secrets.token_hex(16), \
                    body["worker_id"]
                item.lease_expires = now + item.heartbeat_timeout
                item.deadline = item.deadline or now + item.timeout
                claims.append({
                    "run": item.run_json(), "payload": item.payload, "attempt": item.attempt,
                    "lease_token": item.token, "heartbeat_timeout": item.heartbeat_timeout,
                    "timeout": item.timeout,
                    "deadline_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(
                        time.time() + item.deadline - now))})
            if self._drop_answer(path="claim"):
                return DROP, None
            return 200, claims[0] if most is None else {"claims": claims}

    def _held(self, run_id: str, path: str, token: Any) -> Item | None:
        self._expire()
        item = self.items.get(run_id)
        if item is None or item.status != "held" or item.token != token:
            self.refused.append((path, str(token)))
            return None
        return item

    def _heartbeat(self, run_id: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._cond:
            item = self._held(run_id, "heartbeat", body.get("lease_token"))
            if item is None:
                return 409, _error("stale_lease", "the lease is gone")
            item.heartbeats.append(body)
            item.lease_expires = time.monotonic() + item.heartbeat_timeout
            return 200, {"cancel_requested": item.cancel_requested, "lease_expires_at": None}

    def _complete(self, run_id: str,
                  body: dict[str, Any]) -> tuple[int, dict[str, Any] | None]:
        with self._cond:
            item = self._held(run_id, "complete", body.get("lease_token"))
            if item is None:
                return 409, _error("stale_lease", "the lease is gone")
            if body.get("status") not in ("succeeded", "failed"):
                return 400, _error("invalid", "status must be succeeded or failed", "status")
            item.completions.append(body)
            item.status, item.result, item.error = body["status"], body.get("result"), \
                body.get("error")
            item.token = None
            if self._drop_answer(path="complete"):
                return DROP, None
            return 200, item.run_json()

    def _expire(self) -> None:
        """Held items past their lease go back to the queue as their next attempt."""
        now = time.monotonic()
        for item in self.items.values():
            if item.status == "held" and now >= item.lease_expires:
                item.status, item.token, item.worker_id = "queued", None, None
                item.attempt += 1
                self._cond.notify_all()

    # -- lifetime --------------------------------------------------------------

    def start(self) -> WorkQueueServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _error(code: str, message: str, field: str | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "field": field}}


@contextmanager
def work_queue_server(token: str | None = None) -> Iterator[WorkQueueServer]:
    server = WorkQueueServer(token).start()
    try:
        yield server
    finally:
        server.close()
