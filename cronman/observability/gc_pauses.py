"""How long the cyclic garbage collector holds the process, per collection.

Every thread waits while it runs, so on a scheduler node a long collection
is a stall of the event loop: fires due meanwhile start late. The watch
observes each collection's duration into a histogram labelled by generation
(``gc.callbacks``; a few microseconds per collection, and a node collects
rarely: see ``node.GC_THRESHOLDS``).
"""

from __future__ import annotations

import gc
import time
from typing import Any

from prometheus_client import Histogram

GC_PAUSE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class GcPauseWatch:
    """Observes each collection's duration into ``histogram`` (label:
    ``generation``) between ``start()`` and ``stop()``."""

    def __init__(self, histogram: Histogram) -> None:
        self._by_generation = [histogram.labels(str(g)) for g in range(3)]
        self._began = 0.0

    def start(self) -> None:
        if self._note not in gc.callbacks:
            gc.callbacks.append(self._note)

    def stop(self) -> None:
        if self._note in gc.callbacks:
            gc.callbacks.remove(self._note)

    def _note(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self._by_generation[info["generation"]].observe(time.perf_counter() - self._began)
