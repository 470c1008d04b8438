"""How long the cyclic garbage collector holds the process, per collection.

Every thread waits while it runs, so on a scheduler node a long collection
is a stall of the event loop: fires due meanwhile start late. The watch
times each collection (``gc.callbacks``) and hands the durations to a
histogram labelled by generation on ``flush()``, which the node calls from
its event loop: a GC callback runs on whatever thread allocated, possibly
while that thread holds a metrics lock (prometheus_client's multiprocess
mode allocates under its one global lock), so it touches no metric itself.
"""

from __future__ import annotations

import gc
import time
from collections import deque
from typing import Any

from prometheus_client import Histogram

GC_PAUSE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
# Durations kept between flushes, per generation (the oldest are dropped).
PENDING_MAX = 1024


class GcPauseWatch:
    """Times each collection between ``start()`` and ``stop()``; ``flush()``
    observes the durations into ``histogram`` (label: ``generation``)."""

    def __init__(self, histogram: Histogram) -> None:
        self._by_generation = [histogram.labels(str(g)) for g in range(3)]
        # Floats only: appending them allocates nothing the collector tracks.
        self._pending: list[deque[float]] = [deque(maxlen=PENDING_MAX) for _ in range(3)]
        self._began: float | None = None

    def start(self) -> None:
        if self._note not in gc.callbacks:
            gc.callbacks.append(self._note)

    def stop(self) -> None:
        if self._note in gc.callbacks:
            gc.callbacks.remove(self._note)
        self._began = None

    def flush(self) -> None:
        """Observe the collections timed since the last flush."""
        for pending, child in zip(self._pending, self._by_generation, strict=True):
            while pending:
                child.observe(pending.popleft())

    def _note(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        elif self._began is not None:
            self._pending[info["generation"]].append(time.perf_counter() - self._began)
            self._began = None
