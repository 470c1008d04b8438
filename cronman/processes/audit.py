"""``cronman audit export``: the audit exporter, on its own process.

Run one per cluster, or several: one exports, the others stand by on the
advisory lock and take over when the active one's connection goes away.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from types import FrameType

from cronman.audit.exporter import Exporter
from cronman.audit.settings import AuditSettings
from cronman.audit.sinks import open_sink

log = logging.getLogger("cronman.audit")


def default_exporter_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


def run_exporter(database_url: str, settings: AuditSettings, *, exporter_id: str | None = None,
                 metrics_port: int | None = None, metrics_host: str = "0.0.0.0") -> None:
    """Export (or stand by) until SIGTERM/SIGINT."""
    if metrics_port is not None:
        from prometheus_client import start_http_server

        start_http_server(metrics_port, addr=metrics_host)
        log.info("metrics on http://%s:%d/metrics", metrics_host, metrics_port)
    stop = threading.Event()

    def _stop(signum: int, _frame: FrameType | None) -> None:
        log.info("audit exporter stopping (signal %d)", signum)
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    sink = open_sink(settings.url, s3_endpoint_url=settings.s3_endpoint_url)
    exporter = Exporter(database_url, settings, sink,
                        exporter_id=exporter_id or default_exporter_id())
    exporter.run(stop)
