"""``cronman standalone``: the API and one scheduler node in one process, on
SQLite, without Redis.

The database is migrated on start. The API (the same Flask app as
``cronman api``) is served by werkzeug's threaded WSGI server on a background
thread; the node runs on the main thread's event loop and owns the signals.
API and node share one Store (so the node hears job changes through the
store's in-process feed at once) and one in-process coordinator. The node's
metrics are registered in the API's registry, so ``GET /metrics`` shows both.
``container`` targets fail their runs with a clear error: no worker agent
runs here.
"""

from __future__ import annotations

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
        self._thread: threading.Thread | None = None

    def start_api(self) -> str:
        """Migrate, open the store, start serving the API; returns its URL."""
        from werkzeug.serving import make_server

        from cronman.api.app import create_app
        from cronman.scheduler.coordination.memory import InProcessCoordinator
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
        self.server = make_server(host, port, self.app, threaded=True)
        self._thread = threading.Thread(target=self.server.serve_forever, name="cronman-api",
                                        daemon=True)
        self._thread.start()
        url = f"http://{host}:{self.server.server_port}"
        log.info("cronman standalone: API on %s, database %s", url, s.database_url)
        return url

    def build_node(self) -> Any:
        from prometheus_client import REGISTRY

        from cronman.api.metrics import METRICS_KEY
        from cronman.callbacks import build_targets
        from cronman.scheduler.node import SchedulerNode

        api_metrics = self.app.extensions.get(METRICS_KEY)
        registry = REGISTRY
        if api_metrics is not None and not api_metrics.multiprocess:
            registry = api_metrics.registry()
        self.node = SchedulerNode(self.settings, self.store, self.coordinator,
                                  build_targets(self.settings), registry=registry,
                                  address=self.settings.api_bind)
        return self.node

    def run(self) -> None:
        try:
            self.start_api()
            self.build_node().run()
        finally:
            self.close()

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        if self.store is not None:
            self.store.close()
            self.store = None


def standalone_settings(overrides: dict[str, Any]) -> Settings:
    """Settings of the standalone process: private targets allowed by default
    (it runs next to what it calls); never Redis."""
    settings = Settings.from_env(overrides, allow_private_targets=True)
    return settings.with_(redis_url=None)
