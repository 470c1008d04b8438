"""Traces of runs (OpenTelemetry), off unless configured the standard way.

Tracing is on when an OTLP endpoint is set (``OTEL_EXPORTER_OTLP_ENDPOINT``
or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``), unless ``OTEL_SDK_DISABLED=true``
or ``OTEL_TRACES_EXPORTER=none``. The SDK reads the rest itself:
``OTEL_SERVICE_NAME`` (cronman's default: the process, ``cronman-scheduler``,
``cronman-api``, ``cronman-standalone``), ``OTEL_RESOURCE_ATTRIBUTES``,
``OTEL_TRACES_SAMPLER`` / ``OTEL_TRACES_SAMPLER_ARG``, ``OTEL_BSP_*``,
``OTEL_EXPORTER_OTLP_HEADERS``... Spans go out over OTLP/HTTP (protobuf).

When it is off, nothing of OpenTelemetry is imported (it is an optional
dependency: ``pip install 'cronman[tracing]'``): ``configure`` returns None,
and each part that traces is handed None and checks that one value.

Each run is one trace whose id is derived from the run id
(``tracing_otel.trace_id_of``), so every process that touches the run joins
it without storing anything: the API call that triggered or backfilled it
(its root), the
node's ``cronman.run`` span from claim to written result (linked to the
upstream runs a downstream run consumed), ``cronman.claim``,
one ``cronman.attempt`` per attempt (target kind, status, attempt, lateness),
and ``cronman.result_write``. The attempt's context goes to the receiver
(``traceparent``/``tracestate``: HTTP headers, SQS message attributes, the
container's environment). A run handed to a work queue (a ``worker`` target,
an http target completed by callback) keeps its attempt's context with its
item: the claim answers with it (``cronman worker`` passes it on as
``TRACEPARENT``/``TRACESTATE``), and the API's spans of the claim, the
heartbeats and the report are in the run's trace (``run_call``). A replay
of a run continues its trace: the replay's API call, then the node's new
``cronman.run`` span as its child. A ratio sampler decides on the trace id,
so all processes keep or drop a run's trace alike; a node decides once per
run (``tracing_sampling``), and a dropped run costs it no span: its
receivers get its context marked unsampled (``tracing_unsampled``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Protocol

ENDPOINT_ENVS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")

# (header or attribute name, value) pairs of a context to propagate.
Carrier = tuple[tuple[str, str], ...]


def wanted(env: Mapping[str, str] = os.environ) -> bool:
    """Whether the environment asks for traces (see the module docstring)."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower()
    if exporters in ("none", ""):
        return False
    return any(env.get(name, "").strip() for name in ENDPOINT_ENVS)


class RunTrace(Protocol):
    """The spans of one run on the node that holds it."""

    def attempt_started(self, attempt: int, kind: str, lateness_ms: int | None) -> Carrier:
        """Start an attempt's span; returns the context for the receiver."""

    def attempt_ended(self, status: str, error: str | None) -> None:
        """End the attempt's span with the run's status after it."""

    def log_ids(self) -> tuple[str, str]:
        """(trace id, span id) in hex of the span under way, for log records."""

    def ended(self, status: str) -> None:
        """The run reached ``status`` here; its span ends once the row is written."""

    def let_go(self, reason: str) -> None:
        """Another party has the run now: end its spans here."""

    def link_upstream(self, run_ids: Sequence[str]) -> None:
        """Link the run's span to the ``cronman.run`` spans of upstream runs
        it found fresh (``depends_on``)."""


class RunTraces(Protocol):
    """What the scheduler and the API trace runs through."""

    def begin(self, *, run_id: str, job_id: str, job_name: str, namespace: str, origin: str,
              scheduled_for: datetime,
              claimed: tuple[int, int, int] | None = None,
              upstream: Sequence[str] = (), attempt: int = 1) -> RunTrace:
        """The node took a run at ``attempt``: its ``cronman.run`` span (and,
        with ``claimed`` = (start ns, end ns, batch size), its claim's),
        linked to the ``cronman.run`` spans of the ``upstream`` runs it
        consumed. A replay's span is the child of the API call that asked
        for the replay at that attempt (one a node took over after its
        first attempt names a parent the trace lacks). A run the sampler
        drops gets a trace that makes no span."""

    def updates_written(self, run_ids: Iterable[str], start_ns: int, end_ns: int) -> None:
        """A batch of run updates was committed between the two times."""

    def api_call(self, name: str, run_ids: Sequence[str], start_ns: int,
                 headers: Mapping[str, str], attributes: Mapping[str, str], *,
                 replay_attempt: int | None = None) -> None:
        """An API call that asked for these runs (one span in each run's trace,
        linked to the caller's own ``traceparent`` if it sent one), or with
        ``replay_attempt`` for the replay of one starting at that attempt."""

    def run_call(self, name: str, run_id: str, start_ns: int, headers: Mapping[str, str],
                 attributes: Mapping[str, str | int],
                 handed: Mapping[str, str] | None = None) -> None:
        """A call about a run its queue holds (a worker's claim, heartbeat or
        report, a receiver's completion by callback): one span in the run's
        trace, the child of the caller's ``traceparent`` when that is in the
        run's trace, else of ``handed`` (the context the run was handed over
        with) or of the run's ``cronman.run`` span, linked to a caller's
        context of another trace."""

    def run_log_ids(self, run_id: str, *, requested: bool = False,
                    replay_attempt: int | None = None) -> tuple[str, str]:
        """(trace id, span id) in hex for log records about a run: its
        ``cronman.run`` span, or with ``requested`` the API call's that asked
        for it (for its replay, with ``replay_attempt``)."""

    def shutdown(self) -> None:
        """Export what is left."""


_active: RunTraces | None = None


def configure(service: str, env: Mapping[str, str] = os.environ) -> RunTraces | None:
    """Set tracing up for this process when the environment asks for it (once)."""
    global _active
    if _active is None and wanted(env):
        from cronman.observability.tracing_otel import OtelRunTraces

        _active = OtelRunTraces(service)
    return _active


def active() -> RunTraces | None:
    """The process's tracing, or None when it is off."""
    return _active


def shutdown() -> None:
    global _active
    if _active is not None:
        _active.shutdown()
        _active = None
