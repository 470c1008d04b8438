"""OtelRunTraces in one process, exporting to a real OTLP/HTTP receiver on
loopback: every span of a run ends however the run ends (an attempt stopped
from outside, a run handed over, a row never written); a run the sampler
drops makes no span, keeps nothing and still hands on its context."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from opentelemetry.sdk.trace.sampling import Decision, TraceIdRatioBased

from cronman.observability import tracing_otel
from cronman.observability.tracing_otel import OtelRunTraces, request_span_id_of, trace_id_of
from cronman.observability.tracing_unsampled import UnsampledRun
from tests.support.otlp import OtlpReceiver

AT = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def traced(monkeypatch):
    with OtlpReceiver() as otlp:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.endpoint)
        monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
        traces = OtelRunTraces("cronman-unit")
        yield traces, otlp
        traces.shutdown()


def begin(traces, run_id, origin="schedule", attempt=1):
    return traces.begin(run_id=run_id, job_id="j1", job_name="job", namespace="ns",
                        origin=origin, scheduled_for=AT, attempt=attempt)


def names(otlp, run_id):
    return sorted(s.name for s in otlp.trace(format(trace_id_of(run_id), "032x")))


def test_an_attempt_stopped_from_outside_ends_with_the_run(traced):
    traces, otlp = traced
    run = begin(traces, "r1")
    carrier = dict(run.attempt_started(1, "http", 5))
    assert carrier["traceparent"].startswith(f"00-{trace_id_of('r1'):032x}-")
    run.ended("failed")  # replaced: no attempt_ended
    traces.updates_written(["r1", "unknown"], 1, 2)
    traces.shutdown()
    spans = otlp.trace(format(trace_id_of("r1"), "032x"))
    assert sorted(s.name for s in spans) == ["cronman.attempt", "cronman.result_write",
                                             "cronman.run"]
    attempt = next(s for s in spans if s.name == "cronman.attempt")
    assert attempt.attributes["cronman.run.status"] == "failed"
    assert next(s for s in spans if s.name == "cronman.run").status_code == 2
    assert attempt.service == "cronman-unit"


def test_a_run_handed_over_ends_its_spans(traced):
    traces, otlp = traced
    run = begin(traces, "r2")
    run.attempt_started(1, "sqs", None)
    run.let_go("handed back")
    traces.shutdown()
    assert names(otlp, "r2") == ["cronman.attempt", "cronman.run"]


def test_rows_never_written_do_not_pile_up(traced, monkeypatch):
    traces, otlp = traced
    monkeypatch.setattr(tracing_otel, "MAX_AWAITING_WRITE", 2)
    for i in range(3):
        begin(traces, f"w{i}").ended("succeeded")
    assert list(traces.awaiting_write) == ["w1", "w2"]
    traces.shutdown()
    assert names(otlp, "w0") == ["cronman.run"]  # ended without its write
    assert names(otlp, "w1") == []


def test_a_run_handed_to_a_work_queue_ends_at_the_hand_off(traced):
    traces, otlp = traced
    run = begin(traces, "q1")
    run.attempt_started(1, "worker", 3)
    run.ended("running")  # the finisher forgets it: its queue writes from now on
    run.attempt_ended("running", None)
    assert "q1" not in traces.awaiting_write
    traces.shutdown()
    spans = otlp.trace(format(trace_id_of("q1"), "032x"))
    assert sorted(s.name for s in spans) == ["cronman.attempt", "cronman.run"]
    assert next(s for s in spans if s.name == "cronman.run").attributes[
        "cronman.run.handed_off"] is True


def test_a_requested_runs_span_is_the_child_of_its_api_calls(traced):
    traces, otlp = traced
    for origin in ("trigger", "backfill"):
        run_id = f"req-{origin}"
        traces.api_call("POST /x", [run_id], 1, {}, {})
        begin(traces, run_id, origin=origin).let_go("done")
    begin(traces, "sched").let_go("done")
    traces.shutdown()
    for origin in ("trigger", "backfill"):
        spans = otlp.trace(format(trace_id_of(f"req-{origin}"), "032x"))
        api = next(s for s in spans if s.name == "POST /x")
        run = next(s for s in spans if s.name == "cronman.run")
        assert api.span_id == format(request_span_id_of(f"req-{origin}"), "016x")
        assert run.parent_span_id == api.span_id
    [run] = otlp.trace(format(trace_id_of("sched"), "032x"))
    assert run.parent_span_id == ""  # a scheduled run's span is its trace's root


def test_a_replays_span_is_the_child_of_its_api_call(traced):
    traces, otlp = traced
    traces.api_call("POST /replay", ["rp"], 1, {}, {}, replay_attempt=3)
    begin(traces, "rp", origin="replay", attempt=3).let_go("done")
    traces.shutdown()
    spans = otlp.trace(format(trace_id_of("rp"), "032x"))
    api = next(s for s in spans if s.name == "POST /replay")
    run = next(s for s in spans if s.name == "cronman.run")
    assert api.span_id == format(request_span_id_of("rp", 3), "016x")
    assert api.span_id != format(request_span_id_of("rp"), "016x")  # not the trigger's
    assert run.parent_span_id == api.span_id
    assert traces.run_log_ids("rp", requested=True, replay_attempt=3)[1] == api.span_id


TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-(0[01])")


@pytest.mark.parametrize("origin", ["schedule", "trigger", "replay"])
def test_a_dropped_run_makes_no_span_and_waits_for_no_write(monkeypatch, origin):
    """Half the runs dropped, as the SDK's own ratio sampler decides; the
    dropped ones' receivers still get the run's trace, unsampled."""
    with OtlpReceiver() as otlp:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.endpoint)
        monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
        monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0.5")
        traces = OtelRunTraces("cronman-unit")
        sdk = TraceIdRatioBased(0.5)
        run_ids = [f"{origin}-{i}" for i in range(40)]
        dropped = {r for r in run_ids if sdk.should_sample(
            None, trace_id_of(r), "x").decision is not Decision.RECORD_AND_SAMPLE}
        assert 0 < len(dropped) < len(run_ids)
        for run_id in run_ids:
            trace_hex = format(trace_id_of(run_id), "032x")
            run = begin(traces, run_id, origin=origin)
            assert isinstance(run, UnsampledRun) == (run_id in dropped)
            spans = set()
            for attempt in (1, 2):
                [(name, value)] = run.attempt_started(attempt, "http", 3)
                got = TRACEPARENT.fullmatch(value)
                assert name == "traceparent" and got is not None, value
                assert got[1] == trace_hex and got[2] != "0" * 16
                assert got[3] == ("00" if run_id in dropped else "01")
                assert run.log_ids() == (trace_hex, got[2])  # the logs name the receiver's parent
                spans.add(got[2])
                run.attempt_ended("retrying" if attempt == 1 else "succeeded", None)
            assert len(spans) == 2  # a span id per attempt, as before
            run.ended("succeeded")
        assert set(traces.awaiting_write) == set(run_ids) - dropped
        traces.updates_written(run_ids, 1, 2)
        assert traces.awaiting_write == {}
        traces.shutdown()
        assert {s.trace_id for s in otlp.spans} == {
            format(trace_id_of(r), "032x") for r in set(run_ids) - dropped}


def test_a_dropped_runs_log_ids_between_attempts_are_its_run_spans(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    traces = OtelRunTraces("cronman-unit")
    try:
        run = begin(traces, "off")
        assert isinstance(run, UnsampledRun)
        assert run.log_ids() == traces.run_log_ids("off")
        replay = begin(traces, "off", origin="replay")
        first = replay.log_ids()
        assert first[0] == traces.run_log_ids("off")[0] and first[1] != "0" * 16
        assert replay.log_ids() == first  # one random span id, kept
    finally:
        traces.shutdown()
