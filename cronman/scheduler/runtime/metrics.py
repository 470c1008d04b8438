"""Prometheus metrics of a scheduler node, and the counters it publishes with
each heartbeat (``NodeInfo.stats``).

Each node gets its own ``NodeMetrics`` registered in a given registry (the
process default for ``cronman scheduler``, the API's registry in
``cronman standalone``, a fresh one in tests), so no module-level globals.
``cronman scheduler --metrics-port`` serves them with ``/healthz`` and
``/readyz`` (``cronman.observability.node_endpoints``).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
)

from cronman.observability.gc_pauses import GC_PAUSE_BUCKETS
from cronman.observability.namespace_series import NamespaceSeries
from cronman.observability.tallies import Spread, Tally

LATENESS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                    10.0, 30.0, 60.0)
CLAIM_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class NodeMetrics:
    """The node's counters, gauges and histograms."""

    def __init__(self, registry: CollectorRegistry | None = REGISTRY) -> None:
        r = registry
        # Bumped for every fire, on the event loop: lock-free tallies.
        self.fires = Tally("cronman_fires", "Runs dispatched (first attempts), by origin",
                           ("origin",), registry=r)
        self.attempts = Tally("cronman_attempts", "Attempts delivered to targets, by outcome",
                              ("outcome",), registry=r)
        self.runs_finished = Tally("cronman_runs_finished", "Runs that reached a final status",
                                   ("status",), registry=r)
        self.runs_handed_off = Tally("cronman_runs_handed_off",
                                     "Runs of worker targets handed to their work queue",
                                     registry=r)
        self.work_lease_expiries = Tally(
            "cronman_work_lease_expiries", "Work queue items ended or re-queued by the expiry "
            "pass, by reason (lease, timeout, capacity, cancelled, deleted)", ("reason",), registry=r)
        self.lateness = Spread("cronman_fire_lateness_seconds",
                               "Start of a run's first attempt minus its due time (fires of "
                               "the schedule and of upstream jobs; manual runs -- trigger, "
                               "replay, backfill -- are not lateness)",
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
                                 "Fires taken over from their first owner, by why: it stopped "
                                 "pulsing (gone), its dispatch stalled, it was not ready, or "
                                 "it won a claim race and never started the fire, or it was "
                                 "refused as too early and nobody else fired it", ("reason",),
                                 registry=r)
        self.taken_over = Counter("cronman_fires_taken_over",
                                  "Fires this node claimed but a replica took over before "
                                  "this node started them", registry=r)
        self.early_starts = Counter("cronman_early_starts",
                                    "Start marks refused because the fire was not due yet "
                                    "by the cluster's reference clock (this host's clock "
                                    "ran fast)", registry=r)
        self.early_claims = Counter("cronman_early_claims",
                                    "Claims refused because the fire was further ahead of the "
                                    "cluster's reference clock than a claim may be", registry=r)
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
        self.claim_extra_lead = Gauge(
            "cronman_claim_extra_lead_seconds",
            "How much further ahead than usual fires above the default priority are "
            "claimed (the node is behind)", registry=r)
        self.in_flight = Gauge("cronman_runs_in_flight", "Attempts running on this node",
                               registry=r)
        self.owned_jobs = Gauge("cronman_owned_jobs", "Jobs this node owns", registry=r)
        self.reconcile_seconds = Gauge(
            "cronman_last_reconcile_seconds",
            "From the last membership change that gained jobs to those jobs being scheduled",
            registry=r)
        self.clock_offset = Gauge("cronman_clock_offset_seconds",
                                  "This host's clock minus the cluster's reference clock "
                                  "(the Redis server's; PostgreSQL's while Redis is away)",
                                  registry=r)
        self.clock_skewed = Gauge("cronman_clock_skewed",
                                  "1 while this host's clock is off the reference by more "
                                  "than allowed (the node claims nothing meanwhile)", registry=r)
        self.backlog = Gauge("cronman_dispatch_backlog",
                             "Fires due and waiting for a dispatch slot",
                             registry=r)
        self.backlog_seconds = Gauge("cronman_dispatch_backlog_seconds",
                                     "How long the oldest fire due but not started has waited",
                                     registry=r)
        self.held_back = Gauge("cronman_fires_held_back",
                               "Fires due that this node holds back, unclaimed, while its "
                               "dispatch is far behind (its own jobs at or below the default "
                               "priority; raised priorities are still claimed)", registry=r)
        self.saturation = Gauge("cronman_dispatch_saturation",
                                "Attempts in flight over the most this node runs at once",
                                registry=r)
        self.pending_writes = Gauge("cronman_pending_run_writes",
                                    "Run rows and updates waiting to be written", registry=r)
        self.writes_failing = Gauge("cronman_run_writes_failing_seconds",
                                    "Seconds the run writes have been failing in a row "
                                    "(0: they go through)", registry=r)
        self.writes_refused = Counter("cronman_run_writes_refused",
                                      "Run rows the database refused, written without their "
                                      "figures and result (cut) or not at all (dropped)",
                                      ("outcome",), registry=r)
        self.gc_pauses = Histogram("cronman_gc_pause_seconds",
                                   "Collections of the cyclic garbage collector in this "
                                   "process, by generation: every thread (the event loop "
                                   "too) waits while one runs", ("generation",),
                                   buckets=GC_PAUSE_BUCKETS, registry=r)
        # Fires, failures and lateness per namespace, bounded (observability.namespace_series).
        self.namespaces = NamespaceSeries.from_env(r)


class MinuteCounter:
    """Events in the last 60 seconds, in one-second buckets (cheap to bump)."""

    __slots__ = ("_buckets", "_clock")

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
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


# Readiness of a node: (ready, {check: "ok" or what is wrong}).
