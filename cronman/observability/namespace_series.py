"""Per-namespace fires, failures and lateness, with bounded cardinality.

Each namespace is a label value, so an unbounded number of namespaces would
be an unbounded number of series. A node gives its own series to at most
``CRONMAN_METRICS_MAX_NAMESPACES`` namespaces (50 by default), the first it
sees, and counts every other one under ``namespace="other"``; or, when
``CRONMAN_METRICS_NAMESPACES`` lists them (comma-separated), to exactly
those (the same on every node: first-seen order differs between nodes).

Series: ``cronman_namespace_fires_total``, ``cronman_namespace_failures_total``
(runs that ended failed or lost) and ``cronman_namespace_fire_lateness_seconds``
(a histogram with few buckets: 9 series per namespace).
"""

from __future__ import annotations

import os
import threading
from typing import Any

from prometheus_client import CollectorRegistry

from cronman.observability.tallies import Spread, Tally

OTHER = "other"
NAMESPACES_ENV = "CRONMAN_METRICS_NAMESPACES"
MAX_ENV = "CRONMAN_METRICS_MAX_NAMESPACES"
DEFAULT_MAX_NAMESPACES = 50
LATENESS_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0)


def limits_from_env() -> tuple[frozenset[str] | None, int]:
    """(the listed namespaces or None, the most namespaces with their own series)."""
    listed = os.environ.get(NAMESPACES_ENV, "")
    names = frozenset(n.strip() for n in listed.split(",") if n.strip())
    raw = os.environ.get(MAX_ENV, "").strip()
    try:
        limit = int(raw) if raw else DEFAULT_MAX_NAMESPACES
    except ValueError:
        raise ValueError(f"{MAX_ENV} must be an integer, not {raw!r}") from None
    if limit < 0:
        raise ValueError(f"{MAX_ENV} must be >= 0")
    return (names or None), limit


class NamespaceSeries:
    """The per-namespace counters of one node (see the module docstring)."""

    def __init__(self, registry: CollectorRegistry | None, *,
                 allowed: frozenset[str] | None = None,
                 limit: int = DEFAULT_MAX_NAMESPACES) -> None:
        self.allowed = allowed
        self.limit = limit
        self._own: set[str] = set()
        self._lock = threading.Lock()
        # label -> its bound children (the per-fire path skips label look-ups)
        self._children: dict[str, tuple[Any, Any, Any]] = {}
        # Bumped on the event loop (lock-free tallies); the label choice takes a lock.
        self.fires = Tally("cronman_namespace_fires", "Runs dispatched (first attempts), "
                           "per namespace (bounded: see CRONMAN_METRICS_MAX_NAMESPACES)",
                           ("namespace",), registry=registry)
        self.failures = Tally("cronman_namespace_failures",
                              "Runs that ended failed or lost, per namespace (bounded)",
                              ("namespace",), registry=registry)
        self.lateness = Spread("cronman_namespace_fire_lateness_seconds",
                               "Start of a run's first attempt minus its due time, per "
                               "namespace (bounded; manual runs left out)", ("namespace",),
                               buckets=LATENESS_BUCKETS, registry=registry)

    @classmethod
    def from_env(cls, registry: CollectorRegistry | None) -> NamespaceSeries:
        allowed, limit = limits_from_env()
        return cls(registry, allowed=allowed, limit=limit)

    def label(self, namespace: str) -> str:
        """The label value ``namespace`` is counted under."""
        if self.allowed is not None:
            return namespace if namespace in self.allowed else OTHER
        if namespace in self._own:
            return namespace
        with self._lock:
            if namespace in self._own:
                return namespace
            if len(self._own) < self.limit and namespace != OTHER:
                self._own.add(namespace)
                return namespace
        return OTHER

    def _series(self, namespace: str) -> tuple[Any, Any, Any]:
        found = self._children.get(namespace)
        if found is None:
            label = self.label(namespace)
            found = (self.fires.labels(label), self.lateness.labels(label),
                     self.failures.labels(label))
            self._children[namespace] = found
        return found

    def fired(self, namespace: str, lateness_seconds: float | None) -> None:
        """A first attempt started; ``lateness_seconds`` None for a manual run
        (counted as a fire, not in the lateness histogram)."""
        fires, lateness, _ = self._series(namespace)
        fires.inc()
        if lateness_seconds is not None:
            lateness.observe(max(0.0, lateness_seconds))

    def failed(self, namespace: str) -> None:
        self._series(namespace)[2].inc()
