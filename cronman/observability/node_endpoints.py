"""The scheduler's metrics port: ``/metrics``, ``/healthz``, ``/readyz``, and
404 for any other path.

- ``/healthz`` (liveness): 200 while the node's event loop turns -- a no-op
  scheduled on it runs within ``LOOP_DEADLINE`` seconds -- or while it has
  not started yet; 503 once the node stopped or its loop is stuck.
- ``/readyz`` (readiness): 200 once the node has loaded its jobs and claims
  fires (its clock within bounds, its run writes and claims going through,
  not stopping); 503 before and after. Its ``load`` says whether the node is
  overloaded (alive and working but behind: still ready) and by how much.
- ``/metrics``: the node's Prometheus registry, with ``cronman_live_nodes``
  and ``cronman_live_agents`` (the membership as this node sees it:
  ``members``), ``cronman_build_info`` and the
  database member written to (``cronman.observability.db_member``; also in
  ``/readyz`` as ``database_member``).

The server runs on its own daemon threads, so a busy event loop never delays
a probe (the liveness probe measures it instead).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable, Sized
from concurrent.futures import TimeoutError as FutureTimeout
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest

from cronman.observability.build_info import register_build_info
from cronman.observability.db_member import DatabaseMemberCollector, MemberSource, member_json
from cronman.observability.members import live_agents, live_nodes

log = logging.getLogger(__name__)

LOOP_DEADLINE = 5.0  # seconds a no-op may wait on the event loop before it counts as stuck


class LifecycleView(Protocol):
    """What the endpoints read of a node's lifecycle (``scheduler.lifecycle.Lifecycle``)."""

    @property
    def bound_loop(self) -> asyncio.AbstractEventLoop | None: ...

    @property
    def stopping(self) -> bool: ...


class NodeView(Protocol):
    """What the endpoints read of a scheduler node (``SchedulerNode`` has it)."""

    node_id: str
    ready: threading.Event
    stopped: threading.Event
    @property
    def lifecycle(self) -> LifecycleView: ...

    @property
    def members(self) -> list[str]: ...

    def readiness(self) -> tuple[bool, dict[str, str]]: ...

    def load(self) -> dict[str, Any]: ...


def node_loop(node: NodeView) -> asyncio.AbstractEventLoop | None:
    """The node's event loop once it runs, else None."""
    return node.lifecycle.bound_loop


def loop_turns(loop: asyncio.AbstractEventLoop, deadline: float = LOOP_DEADLINE) -> bool:
    """Whether a no-op scheduled on ``loop`` runs within ``deadline`` seconds."""
    if loop.is_closed() or not loop.is_running():
        return False

    async def noop() -> None:
        return None

    try:
        asyncio.run_coroutine_threadsafe(noop(), loop).result(timeout=deadline)
    except (FutureTimeout, RuntimeError):
        return False
    return True


def health(node: NodeView | None) -> tuple[int, dict[str, Any]]:
    if node is None:
        return 200, {"status": "ok", "node": "starting"}
    if node.stopped.is_set():
        return 503, {"status": "stopped", "node_id": node.node_id}
    loop = node_loop(node)
    if loop is not None and not loop_turns(loop):
        return 503, {"status": "stuck", "node_id": node.node_id,
                     "error": f"the event loop did not turn within {LOOP_DEADLINE:g} s"}
    return 200, {"status": "ok", "node_id": node.node_id}


def readiness(node: NodeView | None,
              database_member: MemberSource = lambda: None) -> tuple[int, dict[str, Any]]:
    if node is None:
        return 503, {"status": "unavailable", "checks": {"node": "starting"}}
    ok, checks = node.readiness()
    if node.lifecycle.stopping or node.stopped.is_set():
        ok, checks = False, {**checks, "stopping": "yes"}
    body: dict[str, Any] = {"status": "ready" if ok else "unavailable", "checks": checks,
                            "node_id": node.node_id, "members": len(node.members),
                            "database_member": member_json(database_member()),
                            "load": node.load()}
    return (200 if ok else 503), body


class NodeEndpoints:
    """The HTTP server of a scheduler's metrics port (see the module docstring).

    Start it before the node exists (its address is part of what the node
    publishes), then ``attach`` the node.
    """

    def __init__(self, host: str, port: int, registry: CollectorRegistry = REGISTRY) -> None:
        self.registry = registry
        self.node: NodeView | None = None
        self.database_member: MemberSource = lambda: None
        register_build_info(registry, "scheduler")
        handler = _handler_for(self)
        self.server = ThreadingHTTPServer((host, port), handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       name="cronman-metrics", daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def attach(self, node: NodeView, database_member: MemberSource = lambda: None,
               agents: Callable[[], Sized] | None = None) -> None:
        """Serve ``node``; ``database_member``: the member its store writes to;
        ``agents``: the live worker agents (``cronman_live_agents``), if any."""
        self.node = node
        self.database_member = database_member
        self.registry.register(live_nodes(lambda: node.members))
        if agents is not None:
            self.registry.register(live_agents(agents))
        self.registry.register(DatabaseMemberCollector(database_member))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _handler_for(endpoints: NodeEndpoints) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "cronman-scheduler"

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            try:
                self._answer(self.path.split("?", 1)[0])
            except Exception as exc:  # a probe gets an answer, never a dropped connection
                log.exception("metrics port: %s failed", self.path)
                self._json(500, {"error": {"code": "internal", "field": None,
                                           "message": str(exc)}})

        def _answer(self, path: str) -> None:
            if path == "/metrics":
                self._send(200, generate_latest(endpoints.registry), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                self._json(*health(endpoints.node))
            elif path == "/readyz":
                self._json(*readiness(endpoints.node, endpoints.database_member))
            else:
                self._json(404, {"error": {"code": "not_found", "field": None,
                                           "message": f"nothing at GET {path}; "
                                                      "/metrics, /healthz, /readyz"}})

        def do_HEAD(self) -> None:  # noqa: N802
            self.do_GET()

        def _json(self, status: int, body: dict[str, Any]) -> None:
            self._send(status, (json.dumps(body) + "\n").encode(), "application/json")

        def _send(self, status: int, data: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            log.debug("metrics port: " + format, *args)

    return Handler
