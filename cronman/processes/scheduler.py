"""``cronman scheduler``: one scheduler node of a cluster, on its own process."""

from __future__ import annotations

import logging
import os
import socket

from cronman.callbacks import build_targets
from cronman.config import Settings
from cronman.coordination import make_agent_directory, make_coordinator
from cronman.observability import tracing
from cronman.observability.node_endpoints import NodeEndpoints
from cronman.processes.grants import store_grants
from cronman.processes.notifier import start_notifier
from cronman.scheduler.node import SchedulerNode
from cronman.store import open_store

log = logging.getLogger("cronman.scheduler")


def run_scheduler(settings: Settings, *, metrics_port: int | None = None,
                  metrics_host: str = "0.0.0.0") -> None:
    """Build the node (store, coordinator, targets, metrics server) and run it
    until SIGTERM/SIGINT."""
    if not settings.redis_urls:
        log.warning("CRONMAN_REDIS_URL is not set: this node coordinates with no other node "
                    "(fires are deduplicated by the database alone)")
    address = socket.gethostname()
    endpoints = None
    if metrics_port is not None:
        endpoints = NodeEndpoints(metrics_host, metrics_port)
        address = f"{address}:{metrics_port}"
        log.info("/metrics, /healthz and /readyz on http://%s:%d", metrics_host, metrics_port)
    tracing.configure("cronman-scheduler")  # when OTEL_* ask for it (observability.tracing)
    store = open_store(settings.database_url, settings=settings)
    coordinator = make_coordinator(settings)
    agents = make_agent_directory(settings)
    notifier = None
    try:
        grants = store_grants(store, settings.host_policy_default)
        node = SchedulerNode(settings, store, coordinator,
                             build_targets(settings, agents=agents, grants=grants),
                             address=address)
        if endpoints is not None:
            endpoints.attach(node, store.database_member,
                             agents.live_agents if agents is not None else None)
        log.info("scheduler node %s (pid %d) starting", settings.node_id, os.getpid())
        notifier = start_notifier(settings, store)
        node.run()
    finally:
        if notifier is not None:
            notifier.stop()
        coordinator.close()
        if agents is not None:
            agents.close()
        store.close()
        tracing.shutdown()
