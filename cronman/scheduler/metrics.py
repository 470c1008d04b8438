"""Prometheus metrics of a scheduler node, and the counters it publishes with
each heartbeat (``NodeInfo.stats``).

Each node gets its own ``NodeMetrics`` registered in a given registry (the
process default for ``cronman scheduler``, the API's registry in
``cronman standalone``, a fresh one in tests), so no module-level globals.
"""

from __future__ import annotations

import time
from collections import deque

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

LATENESS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                    10.0, 30.0, 60.0)
CLAIM_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class NodeMetrics:
    """The node's counters, gauges and histograms."""

    def __init__(self, registry: CollectorRegistry | None = REGISTRY) -> None:
        r = registry
        self.fires = Counter("cronman_fires", "Runs dispatched (first attempts), by origin",
                             ("origin",), registry=r)
        self.attempts = Counter("cronman_attempts", "Attempts delivered to targets, by outcome",
                                ("outcome",), registry=r)
        self.runs_finished = Counter("cronman_runs_finished", "Runs that reached a final status",
                                     ("status",), registry=r)
        self.lateness = Histogram("cronman_fire_lateness_seconds",
                                  "Start of a run's first attempt minus its due time",
                                  buckets=LATENESS_BUCKETS, registry=r)
        self.lock_wins = Counter("cronman_lock_wins", "Fire locks won in the coordinator",
                                 registry=r)
        self.lock_losses = Counter("cronman_lock_losses",
                                   "Fire locks lost in the coordinator (a replica had it)",
                                   registry=r)
        self.fence_losses = Counter("cronman_fence_losses",
                                    "Fires whose run row already existed (database fence)",
                                    registry=r)
        self.double_fires = Counter("cronman_double_fires",
                                    "Fires dispatched while the database was down whose run "
                                    "row turned out to exist already", registry=r)
        self.takeovers = Counter("cronman_fire_takeovers",
                                 "Fires taken over from a replica that claimed them but had "
                                 "not started them shortly after their due time", registry=r)
        self.taken_over = Counter("cronman_fires_taken_over",
                                  "Fires this node claimed but a replica took over before "
                                  "this node started them", registry=r)
        self.misfires_skipped = Counter("cronman_misfires_skipped",
                                        "Fire times passed over by the misfire policy",
                                        registry=r)
        self.dispatch_errors = Counter("cronman_dispatch_errors",
                                       "Failed attempts, by target kind", ("kind",), registry=r)
        self.not_dispatched = Counter("cronman_fires_not_dispatched",
                                      "Fires not dispatched because neither the database nor "
                                      "the coordinator could be reached", registry=r)
        self.recovered = Counter("cronman_runs_recovered",
                                 "Runs taken over after their lease expired, by action",
                                 ("action",), registry=r)
        self.store_errors = Counter("cronman_store_errors", "Database operations that failed",
                                    ("op",), registry=r)
        self.coordinator_errors = Counter("cronman_coordinator_errors",
                                          "Coordinator operations that failed", ("op",),
                                          registry=r)
        self.results_dropped = Counter("cronman_results_dropped",
                                       "Run updates dropped because the write buffer was full",
                                       registry=r)
        self.dead_letters = Counter("cronman_dead_letters", "Dead-letter deliveries, by outcome",
                                    ("outcome",), registry=r)
        self.claim_seconds = Histogram("cronman_claim_batch_seconds",
                                       "Time to claim one batch of fires (coordinator + database)",
                                       buckets=CLAIM_BUCKETS, registry=r)
        self.claim_batch = Histogram("cronman_claim_batch_size", "Fires per claim batch",
                                     buckets=(1, 5, 10, 50, 100, 250, 500, 1000, 2500, 5000),
                                     registry=r)
        self.in_flight = Gauge("cronman_runs_in_flight", "Attempts running on this node",
                               registry=r)
        self.owned_jobs = Gauge("cronman_owned_jobs", "Jobs this node owns", registry=r)
        self.reconcile_seconds = Gauge(
            "cronman_last_reconcile_seconds",
            "From the last membership change that gained jobs to those jobs being scheduled",
            registry=r)
        self.pending_writes = Gauge("cronman_pending_run_writes",
                                    "Run rows and updates waiting to be written", registry=r)


class MinuteCounter:
    """Events in the last 60 seconds, in one-second buckets (cheap to bump)."""

    __slots__ = ("_buckets", "_clock")

    def __init__(self, clock=time.monotonic) -> None:
        self._buckets: deque[list[int]] = deque()
        self._clock = clock

    def add(self, n: int = 1) -> None:
        sec = int(self._clock())
        if self._buckets and self._buckets[-1][0] == sec:
            self._buckets[-1][1] += n
        else:
            self._buckets.append([sec, n])
            self._trim(sec)

    def value(self) -> int:
        self._trim(int(self._clock()))
        return sum(b[1] for b in self._buckets)

    def _trim(self, sec: int) -> None:
        while self._buckets and self._buckets[0][0] <= sec - 60:
            self._buckets.popleft()
