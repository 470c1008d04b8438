"""``cronman_live_nodes`` and ``cronman_live_agents``: the cluster's scheduler
nodes and worker agents as one process sees them, read at scrape time.

The alert rules (ops/prometheus/) compare each with its recent maximum: a
member that left without being replaced shows as a drop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sized

from prometheus_client.core import GaugeMetricFamily

log = logging.getLogger(__name__)


class LiveCountCollector:
    """One gauge whose value is ``len(read())`` at scrape time; no sample when
    ``read`` fails (a scrape never fails for it)."""

    def __init__(self, name: str, documentation: str, read: Callable[[], Sized]) -> None:
        self.name = name
        self.documentation = documentation
        self._read = read

    def describe(self) -> list[GaugeMetricFamily]:
        # Registering must not call ``read`` (the registry would call collect()).
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            value = len(self._read())
        except Exception:
            log.warning("cannot read %s for /metrics", self.name, exc_info=True)
            return
        yield GaugeMetricFamily(self.name, self.documentation, value=value)


def live_nodes(read: Callable[[], Sized]) -> LiveCountCollector:
    """``cronman_live_nodes`` over a node's membership view (``node.members``)."""
    return LiveCountCollector("cronman_live_nodes",
                              "Live scheduler nodes in this node's membership view", read)


def live_agents(read: Callable[[], Sized]) -> LiveCountCollector:
    """``cronman_live_agents`` over the agent directory's ``live_agents``."""
    return LiveCountCollector("cronman_live_agents",
                              "Live worker agents in the agent directory", read)
