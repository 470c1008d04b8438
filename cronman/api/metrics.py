"""``GET /metrics``: request counts and latency by route and status, the job count,
and the database member written to (``cronman.observability.db_member``).

Under gunicorn with several workers, ``cronman api`` sets
``PROMETHEUS_MULTIPROC_DIR`` so that a scrape, whichever worker answers it,
sees the sum over all workers (prometheus_client's multiprocess mode).
"""

from __future__ import annotations

import functools
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator

from flask import Blueprint, Flask, Response, current_app, g, request
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector

from cronman.api.common import ApiView
from cronman.observability.build_info import BuildInfoCollector
from cronman.observability.db_member import DatabaseMemberCollector, MemberSource
from cronman.store.work_records import QueueStats

log = logging.getLogger(__name__)

bp = Blueprint("metrics", __name__)

JOB_COUNT_CACHE_SECONDS = 5.0
CLAIM_WAIT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                      300.0, 1800.0, 3600.0)
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
METRICS_KEY = "cronman_metrics"


class JobCountCollector:
    """The number of live jobs, read from the store at scrape time (cached briefly)."""

    def __init__(self, count: Callable[[], int | None]) -> None:
        self._count = count
        self._lock = threading.Lock()
        self._cached: tuple[float, int | None] = (0.0, None)

    def describe(self) -> list[GaugeMetricFamily]:
        # Registering must not query the store (the registry would call collect()).
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self._lock:
            at, value = self._cached
            if value is None or time.monotonic() - at > JOB_COUNT_CACHE_SECONDS:
                try:
                    value = self._count()
                except Exception:
                    log.warning("cannot count jobs for /metrics", exc_info=True)
                    value = None
                self._cached = (time.monotonic(), value)
        if value is not None:
            yield GaugeMetricFamily("cronman_jobs", "Live (not deleted) jobs", value=value)


class QueueDepthCollector:
    """Each work queue's depth, read from the store at scrape time (cached briefly)."""

    def __init__(self, queues: Callable[[], list[QueueStats]] | None) -> None:
        self._queues = queues
        self._lock = threading.Lock()
        self._cached: tuple[float, list[QueueStats] | None] = (0.0, None)

    def describe(self) -> list[GaugeMetricFamily]:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        if self._queues is None:
            return
        with self._lock:
            at, found = self._cached
            if found is None or time.monotonic() - at > JOB_COUNT_CACHE_SECONDS:
                try:
                    found = self._queues()
                except Exception:
                    log.warning("cannot read the work queues for /metrics", exc_info=True)
                    found = None
                self._cached = (time.monotonic(), found)
        if found is None:
            return
        depth = GaugeMetricFamily("cronman_work_queue_depth",
                                  "Runs waiting on a work queue for a worker",
                                  labels=("namespace", "queue"))
        held = GaugeMetricFamily("cronman_work_queue_held",
                                 "Runs of a work queue held by workers",
                                 labels=("namespace", "queue"))
        for q in found:
            depth.add_metric((q.namespace, q.queue), q.depth)
            held.add_metric((q.namespace, q.queue), q.held)
        yield depth
        yield held


class ApiMetrics:
    def __init__(self, count_jobs: Callable[[], int | None],
                 database_member: MemberSource = lambda: None,
                 queues: Callable[[], list[QueueStats]] | None = None) -> None:
        self.multiprocess = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
        # In multiprocess mode values live in files; the objects need no registry.
        own = None if self.multiprocess else CollectorRegistry(auto_describe=True)
        self._own = own
        self.requests = Counter(
            "cronman_api_requests", "HTTP requests answered by the API",
            ("method", "route", "status"), registry=own)
        self.latency = Histogram(
            "cronman_api_request_duration_seconds", "Time to answer an API request",
            ("method", "route"), buckets=LATENCY_BUCKETS, registry=own)
        self.work_claims = Counter(
            "cronman_work_claims", "Runs claimed by workers", ("namespace", "queue"),
            registry=own)
        self.claim_wait = Histogram(
            "cronman_work_claim_wait_seconds",
            "From a run's due time to its claim by a worker (retries: from their backoff's end)",
            buckets=CLAIM_WAIT_BUCKETS, registry=own)
        self.job_count = JobCountCollector(count_jobs)
        self.queue_depth = QueueDepthCollector(queues)
        self.build_info = BuildInfoCollector("api")
        self.database_member = DatabaseMemberCollector(database_member)
        if own is not None:
            own.register(self.queue_depth)
            own.register(self.job_count)
            own.register(self.build_info)
            own.register(self.database_member)

    def registry(self) -> CollectorRegistry:
        if self._own is not None:
            return self._own
        registry = CollectorRegistry()
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        registry.register(self.job_count)
        registry.register(self.queue_depth)
        registry.register(self.build_info)
        registry.register(self.database_member)  # this worker's own connections
        return registry

    def claimed(self, namespace: str, queue: str, waited: float) -> None:
        self.work_claims.labels(namespace, queue).inc()
        self.claim_wait.observe(waited)

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(method, route).observe(seconds)


@functools.cache
def route_label(rule: str) -> str:
    """``/v1/jobs/<id:job_id>`` -> ``/v1/jobs/{job_id}`` (the OpenAPI spelling)."""
    return re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", rule)


def install(app: Flask, count_jobs: Callable[[], int | None],
            database_member: MemberSource = lambda: None,
            queues: Callable[[], list[QueueStats]] | None = None) -> ApiMetrics:
    metrics = ApiMetrics(count_jobs, database_member, queues)
    app.extensions[METRICS_KEY] = metrics

    @app.before_request
    def _start_timer() -> None:
        g.cronman_started = time.perf_counter()

    @app.after_request
    def _count(response: Response) -> Response:
        started = g.pop("cronman_started", None)
        if started is not None:
            rule = request.url_rule
            route = route_label(rule.rule) if rule is not None else "unmatched"
            metrics.observe(request.method, route, response.status_code,
                            time.perf_counter() - started)
        return response

    return metrics


class Metrics(ApiView):
    def get(self) -> Response:
        metrics: ApiMetrics = current_app.extensions[METRICS_KEY]
        return Response(generate_latest(metrics.registry()), content_type=CONTENT_TYPE_LATEST)


bp.add_url_rule("/metrics", view_func=Metrics.as_view("metrics"))
