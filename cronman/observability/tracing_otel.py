"""``RunTraces`` over the OpenTelemetry SDK and its OTLP/HTTP exporter
(imported only when tracing is configured: ``observability.tracing``).

A run is sampled or dropped once, in ``begin`` (``tracing_sampling``): a
dropped run gets an ``UnsampledRun``, which makes no span at all.
"""

from __future__ import annotations

import contextvars
import hashlib
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.sdk.trace.sampling import Decision
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from cronman.observability.tracing_sampling import run_sampler
from cronman.observability.tracing_unsampled import UnsampledRun, random_span_hex

_FORCED: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "cronman_forced_ids", default=None)
_PROPAGATOR = TraceContextTextMapPropagator()
Carrier = tuple[tuple[str, str], ...]  # as tracing.Carrier (that module imports this one)
_FAILED = ("failed", "lost")
# The origins of runs an API call asked for (its span is their trace's root).
REQUESTED = ("trigger", "backfill")
_FINAL = ("succeeded", "failed", "lost", "skipped")
# Runs whose final row is not written yet (their span ends with the write).
MAX_AWAITING_WRITE = 100_000


def trace_id_of(run_id: str) -> int:
    """The trace id of a run: the first 16 bytes of a digest of its id."""
    return int.from_bytes(hashlib.sha256(b"cronman-run:" + run_id.encode()).digest()[:16],
                          "big") or 1


def request_span_id_of(run_id: str, replay_attempt: int | None = None) -> int:
    """The span id of the API call that asked for a run (the node's run span
    is its child without being told); with ``replay_attempt``, of the call
    that asked for its replay starting at that attempt."""
    key = (b"cronman-request:" + run_id.encode() if replay_attempt is None
           else b"cronman-replay:%d:%s" % (replay_attempt, run_id.encode()))
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") or 1


def run_span_id_of(run_id: str) -> int:
    """The span id of a run's ``cronman.run`` span (a downstream run links
    to it knowing only the run id); a replay's is random."""
    return int.from_bytes(hashlib.sha256(b"cronman-run-span:" + run_id.encode()).digest()[:8],
                          "big") or 1


def _run_span_hex(run_id: str) -> str:
    return format(run_span_id_of(run_id), "016x")


def _replay_span_hex(run_id: str) -> str:
    return random_span_hex()  # a replay's run span id is random (the run's is taken)


def _context_of(headers: Mapping[str, str]) -> SpanContext:
    """The W3C trace context in ``headers`` (invalid when there is none)."""
    carrier = {k.lower(): v for k, v in headers.items()}
    return trace.get_current_span(_PROPAGATOR.extract(carrier)).get_span_context()


class RunIds(IdGenerator):
    """Random ids, except the trace (and span) id forced for the span being started."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()

    def generate_trace_id(self) -> int:
        forced = _FORCED.get()
        return forced[0] if forced is not None else self._random.generate_trace_id()

    def generate_span_id(self) -> int:
        forced = _FORCED.get()
        if forced is not None and forced[1]:
            _FORCED.set((forced[0], 0))  # only the first span started takes it
            return forced[1]
        return self._random.generate_span_id()


class OtelRunTrace:
    """One run's spans (``tracing.RunTrace``)."""

    __slots__ = ("_owner", "run_id", "_run", "_attempt", "_status")

    def __init__(self, owner: OtelRunTraces, run_id: str, run: Span) -> None:
        self._owner = owner
        self.run_id = run_id
        self._run = run
        self._attempt: Span | None = None
        self._status = ""

    def attempt_started(self, attempt: int, kind: str, lateness_ms: int | None) -> Carrier:
        attributes: dict[str, str | int] = {"cronman.target.kind": kind,
                                            "cronman.attempt": attempt}
        if lateness_ms is not None:
            attributes["cronman.lateness_ms"] = lateness_ms
        context = trace.set_span_in_context(self._run)
        span = self._attempt = self._owner.tracer.start_span(
            "cronman.attempt", context=context, kind=SpanKind.CLIENT, attributes=attributes)
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
        return tuple(carrier.items())

    def attempt_ended(self, status: str, error: str | None) -> None:
        span, self._attempt = self._attempt, None
        if span is None:
            return
        span.set_attribute("cronman.run.status", status)
        if error:
            span.set_status(Status(StatusCode.ERROR, error[:500]))
        span.end()

    def log_ids(self) -> tuple[str, str]:
        context = (self._attempt or self._run).get_span_context()
        return format(context.trace_id, "032x"), format(context.span_id, "016x")

    def ended(self, status: str) -> None:
        self._status = status
        self._run.set_attribute("cronman.run.status", status)
        if status not in _FINAL:  # handed to a work queue (a worker target): no write here
            self._run.set_attribute("cronman.run.handed_off", True)
            self._run.end()
            return
        if status in _FAILED:
            self._run.set_status(Status(StatusCode.ERROR, status))
        waiting = self._owner.awaiting_write
        waiting[self.run_id] = self
        if len(waiting) > MAX_AWAITING_WRITE:  # rows dropped or never written: end the oldest
            oldest = waiting.pop(next(iter(waiting)))
            oldest.attempt_ended(oldest._status, None)
            oldest._run.set_attribute("cronman.run.written", False)
            oldest._run.end()

    def written(self, start_ns: int, end_ns: int) -> None:
        self.attempt_ended(self._status, None)  # one stopped from outside, never ended
        span = self._owner.tracer.start_span(
            "cronman.result_write", context=trace.set_span_in_context(self._run),
            start_time=start_ns, attributes={"cronman.run.status": self._status})
        span.end(end_time=end_ns)
        self._run.end(end_time=end_ns)

    def let_go(self, reason: str) -> None:
        self.attempt_ended("handed over", None)
        self._run.set_attribute("cronman.run.let_go", reason)
        self._run.end()

    def link_upstream(self, run_ids: Sequence[str]) -> None:
        for link in self._owner.upstream_links(run_ids):
            self._run.add_link(link.context, link.attributes)


class OtelRunTraces:
    """``tracing.RunTraces`` on a tracer provider of its own."""

    def __init__(self, service: str) -> None:
        attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: service}
        self.provider = TracerProvider(resource=Resource.create(attributes), id_generator=RunIds())
        self.provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        self.tracer = self.provider.get_tracer("cronman")
        self.awaiting_write: dict[str, OtelRunTrace] = {}
        # None: a sampler of a kind decided span by span (every run is begun in full).
        self._run_sampler = run_sampler(self.provider.sampler)

    def _sampled(self, trace_id: int, name: str) -> bool:
        """The root sampler's decision on ``trace_id`` (what the API call's span got)."""
        decide = self._run_sampler
        if decide is not None:
            return decide(trace_id, None)
        result = self.provider.sampler.should_sample(None, trace_id, name)
        return result.decision is Decision.RECORD_AND_SAMPLE

    def begin(self, *, run_id: str, job_id: str, job_name: str, namespace: str, origin: str,
              scheduled_for: datetime,
              claimed: tuple[int, int, int] | None = None,
              upstream: Sequence[str] = (), attempt: int = 1) -> OtelRunTrace | UnsampledRun:
        trace_id = trace_id_of(run_id)
        replay = origin == "replay"
        # The API call that asked for the run (or its replay) is its span's
        # parent, sampled as the API's own sampler decided on the trace id.
        requested = replay or origin in REQUESTED
        parent_sampled = self._sampled(trace_id, "cronman.run") if requested else None
        decide = self._run_sampler
        if decide is not None and not decide(trace_id, parent_sampled):
            return UnsampledRun(format(trace_id, "032x"), run_id,
                                _replay_span_hex if replay else _run_span_hex)
        span_id = 0 if replay else run_span_id_of(run_id)
        links = self.upstream_links(upstream)
        attributes = {"cronman.run.id": run_id, "cronman.job.id": job_id,
                      "cronman.job.name": job_name, "cronman.namespace": namespace,
                      "cronman.run.origin": origin,
                      "cronman.run.scheduled_for": scheduled_for.isoformat()}
        start = claimed[0] if claimed is not None else None
        if requested:  # the API call's span is the root of the run's (or replay's) spans
            parent = SpanContext(trace_id, request_span_id_of(run_id, attempt if replay else None),
                                 is_remote=True, trace_flags=TraceFlags(
                                     TraceFlags.SAMPLED if parent_sampled else TraceFlags.DEFAULT))
            context = trace.set_span_in_context(trace.NonRecordingSpan(parent))
        else:
            context = None
        token = _FORCED.set((trace_id, span_id))
        try:
            run = self.tracer.start_span("cronman.run", context=context, links=links,
                                         attributes=attributes, start_time=start)
        finally:
            _FORCED.reset(token)
        if claimed is not None:
            claim = self.tracer.start_span(
                "cronman.claim", context=trace.set_span_in_context(run), start_time=claimed[0],
                attributes={"cronman.claim.batch_size": claimed[2]})
            claim.end(end_time=claimed[1])
        return OtelRunTrace(self, run_id, run)

    def upstream_links(self, run_ids: Sequence[str]) -> list[Link]:
        links = []
        for run_id in run_ids:
            tid = trace_id_of(run_id)
            flags = TraceFlags(TraceFlags.SAMPLED if self._sampled(tid, "cronman.run")
                               else TraceFlags.DEFAULT)
            links.append(Link(SpanContext(tid, run_span_id_of(run_id), is_remote=True,
                                          trace_flags=flags),
                              {"cronman.link": "upstream", "cronman.run.id": run_id}))
        return links

    def updates_written(self, run_ids: Iterable[str], start_ns: int, end_ns: int) -> None:
        waiting = self.awaiting_write
        if not waiting:  # no sampled run waits for its write
            return
        for run_id in run_ids:
            found = waiting.pop(run_id, None)
            if found is not None:
                found.written(start_ns, end_ns)

    def api_call(self, name: str, run_ids: Sequence[str], start_ns: int,
                 headers: Mapping[str, str], attributes: Mapping[str, str], *,
                 replay_attempt: int | None = None) -> None:
        caller = _context_of(headers)
        links = [Link(caller)] if caller.is_valid else []
        end_ns = time.time_ns()
        for run_id in run_ids:
            token = _FORCED.set((trace_id_of(run_id), request_span_id_of(run_id, replay_attempt)))
            try:
                span = self.tracer.start_span(
                    name, context=None, kind=SpanKind.SERVER, links=links, start_time=start_ns,
                    attributes={**attributes, "cronman.run.id": run_id})
            finally:
                _FORCED.reset(token)
            span.end(end_time=end_ns)

    def run_call(self, name: str, run_id: str, start_ns: int, headers: Mapping[str, str],
                 attributes: Mapping[str, str | int],
                 handed: Mapping[str, str] | None = None) -> None:
        trace_id = trace_id_of(run_id)
        caller = _context_of(headers)
        links = []
        if caller.is_valid and caller.trace_id == trace_id:
            parent = caller
        else:
            if caller.is_valid:
                links.append(Link(caller))
            parent = _context_of(handed or {})
            if not parent.is_valid or parent.trace_id != trace_id:
                flags = TraceFlags.SAMPLED if self._sampled(trace_id, name) else TraceFlags.DEFAULT
                parent = SpanContext(trace_id, run_span_id_of(run_id), is_remote=True,
                                     trace_flags=TraceFlags(flags))
        span = self.tracer.start_span(
            name, context=trace.set_span_in_context(trace.NonRecordingSpan(parent)),
            kind=SpanKind.SERVER, links=links, start_time=start_ns,
            attributes={**attributes, "cronman.run.id": run_id})
        span.end()

    def run_log_ids(self, run_id: str, *, requested: bool = False,
                    replay_attempt: int | None = None) -> tuple[str, str]:
        span_id = (request_span_id_of(run_id, replay_attempt) if requested
                   else run_span_id_of(run_id))
        return format(trace_id_of(run_id), "032x"), format(span_id, "016x")

    def shutdown(self) -> None:
        self.provider.shutdown()
