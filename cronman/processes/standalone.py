"""``cronman standalone``: the API and one scheduler node in one process, on
SQLite, without Redis.

The database is migrated on start. The API (the same Flask app as
``cronman api``) is served by werkzeug's threaded WSGI server on a background
thread; the node runs on the main thread's event loop and owns the signals.
API and node share one Store (so the node hears job changes through the
store's in-process feed at once) and one in-process coordinator. The node's
metrics are registered in the API's registry, so ``GET /metrics`` shows both.
A ``process`` worker agent runs in the same process (on a thread of its own
with its own event loop), met through an in-process agent directory:
``container`` targets run their ``command`` as a child process (no image,
no isolation; see ``worker_agent.runtimes.process``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from cronman.config import Settings

log = logging.getLogger(__name__)


def split_bind(bind: str) -> tuple[str, int]:
    host, _, port = bind.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    return host, int(port)


class Standalone:
    """Builds and runs the standalone process; ``run`` blocks until SIGTERM/SIGINT."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.store: Any = None
        self.server: Any = None
        self.node: Any = None
        self.notifier: Any = None
        self._thread: threading.Thread | None = None
        self.agents: Any = None
        self._agent_thread: threading.Thread | None = None
        self._agent_loop: asyncio.AbstractEventLoop | None = None
        self._agent_stop: asyncio.Event | None = None

    def start_api(self) -> str:
        """Migrate, open the store, start serving the API; returns its URL."""
        from sqlalchemy.engine import make_url
        from werkzeug.serving import make_server

        from cronman.api.access_log import RequestHandler
        from cronman.api.app import create_app
        from cronman.coordination.memory import InProcessCoordinator
        from cronman.store import open_store
        from cronman.store.migrate import upgrade

        s = self.settings
        report = upgrade(s.database_url, days_ahead=s.partitions_ahead_days,
                         retention_days=s.history_retention_days, node_id=s.node_id)
        if report.changed:
            log.info("database schema upgraded %s -> %s", report.before or "(empty)",
                     report.after)
        self.store = open_store(s.database_url, settings=s)
        self.coordinator = InProcessCoordinator(ttl=s.heartbeat_ttl)
        self.app = create_app(s, store=self.store, coordinator=self.coordinator)
        host, port = split_bind(s.api_bind)
        self.server = make_server(host, port, self.app, threaded=True,
                                  request_handler=RequestHandler)
        self._thread = threading.Thread(target=self.server.serve_forever, name="cronman-api",
                                        daemon=True)
        self._thread.start()
        url = f"http://{host}:{self.server.server_port}"
        log.info("cronman standalone: API on %s, database %s", url,
                 make_url(s.database_url).render_as_string(hide_password=True))
        return url

    def build_node(self) -> Any:
        from cronman.api.auth import token_auth
        from cronman.api.health import add_readiness_check
        from cronman.callbacks import build_targets
        from cronman.config import AUTH_REQUIRED
        from cronman.processes.grants import standalone_open_default, store_grants
        from cronman.scheduler.node import SchedulerNode

        default = self.settings.host_policy_default
        auth = token_auth(self.app)
        grants = store_grants(self.store, default, standalone_open_default(
            default, lambda: auth.state().mode == AUTH_REQUIRED))
        self.node = SchedulerNode(self.settings, self.store, self.coordinator,
                                  build_targets(self.settings, agents=self.agents,
                                                grants=grants),
                                  registry=self._registry(), address=self.settings.api_bind)
        # /readyz says so when the node's run writes are stuck.
        add_readiness_check(self.app, "run_writes", self.node.writer.health)
        self._register_members(self.node)
        return self.node

    def _register_members(self, node: Any) -> None:
        """``cronman_live_nodes`` and ``cronman_live_agents`` on ``GET /metrics``."""
        from cronman.observability.members import live_agents, live_nodes

        registry = self._registry()
        registry.register(live_nodes(lambda: node.members))
        if self.agents is not None:
            registry.register(live_agents(self.agents.live_agents))

    def _registry(self) -> Any:
        """The API's registry (``GET /metrics`` shows the node's metrics too)."""
        from prometheus_client import REGISTRY

        from cronman.api.metrics import METRICS_KEY

        api_metrics = self.app.extensions.get(METRICS_KEY)
        if api_metrics is not None and not api_metrics.multiprocess:
            return api_metrics.registry()
        return REGISTRY

    def start_notifier(self) -> Any:
        """The notifier on its own thread, sharing the store; metrics in the API's registry."""
        from cronman.processes.notifier import start_notifier

        self.notifier = start_notifier(self.settings, self.store, self._registry())
        return self.notifier

    def start_agent(self) -> None:
        """Start the in-process ``process`` worker agent (returns once it is live)."""
        from cronman.coordination.agents import Capacity
        from cronman.coordination.agents_memory import InProcessAgentDirectory
        from cronman.processes.agent import host_capacity
        from cronman.worker_agent.agent import WorkerAgent
        from cronman.worker_agent.runtimes.process import ProcessRuntime

        s = self.settings
        self.agents = InProcessAgentDirectory()
        from cronman.api.cluster import AGENTS_KEY

        self.app.extensions[AGENTS_KEY] = self.agents
        cores, memory = host_capacity()
        worker = WorkerAgent(s.agent_id, self.agents, ProcessRuntime(),
                             capacity=Capacity(s.agent_cpu or cores, s.agent_memory_mb or memory,
                                               s.agent_slots),
                             labels=s.agent_label_map, heartbeat_ttl=s.heartbeat_ttl,
                             lease_seconds=s.lease_seconds, address="standalone",
                             policy=s.agent_policy(process_runtime=True))
        started = threading.Event()

        async def main() -> None:
            self._agent_loop = asyncio.get_running_loop()
            self._agent_stop = asyncio.Event()
            started.set()
            await worker.main(self._agent_stop)

        self._agent_thread = threading.Thread(target=asyncio.run, args=(main(),),
                                              name="cronman-agent", daemon=True)
        self._agent_thread.start()
        started.wait(5.0)

    def stop_agent(self) -> None:
        loop, stop = self._agent_loop, self._agent_stop
        if loop is not None and stop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:
                pass
        if self._agent_thread is not None:
            self._agent_thread.join(timeout=10.0)
            self._agent_thread = None

    def run(self) -> None:
        from cronman.observability import tracing

        tracing.configure("cronman-standalone")  # when OTEL_* ask for it
        try:
            self.start_api()
            self.start_agent()
            node = self.build_node()
            self.start_notifier()
            node.run()
        finally:
            self.close()

    def close(self) -> None:
        if self.notifier is not None:
            self.notifier.stop()
            self.notifier = None
        self.stop_agent()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        if self.store is not None:
            self.store.close()
            self.store = None
        from cronman.observability import tracing

        tracing.shutdown()


def standalone_settings(overrides: dict[str, Any]) -> Settings:
    """Settings of the standalone process: private targets allowed by default
    (it runs next to what it calls); never Redis."""
    settings = Settings.from_env(overrides, allow_private_targets=True)
    return settings.with_(redis_url=None)
