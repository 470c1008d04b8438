"""``cronman_build_info``: a gauge of 1 whose labels say what runs (the
version, the Python, and the commit when the image was built with
``CRONMAN_BUILD_COMMIT``)."""

from __future__ import annotations

import os
import platform
from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily

from cronman import __version__

COMMIT_ENV = "CRONMAN_BUILD_COMMIT"


class BuildInfoCollector:
    """Collects the one ``cronman_build_info`` sample; ``component``: api, scheduler."""

    def __init__(self, component: str) -> None:
        self.labels = {"version": __version__, "python": platform.python_version(),
                       "commit": os.environ.get(COMMIT_ENV, "unknown"), "component": component}

    def describe(self) -> list[GaugeMetricFamily]:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily("cronman_build_info", "What this cronman process runs",
                                   labels=list(self.labels))
        family.add_metric(list(self.labels.values()), 1)
        yield family


def register_build_info(registry: CollectorRegistry, component: str) -> BuildInfoCollector:
    collector = BuildInfoCollector(component)
    registry.register(collector)
    return collector
