"""Tracing is off unless an OTLP endpoint is configured, and then costs no
import of OpenTelemetry; the trace context reaches each kind of target in
its own form (HTTP header lines, SQS attributes within SQS's 10, container
environment)."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime

from cronman.callbacks.base import Delivery
from cronman.callbacks.http import trace_lines
from cronman.callbacks.sqs import build_send_kwargs
from cronman.observability.tracing import wanted
from cronman.worker_agent.agent import HeldRun, run_env

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_on_only_with_an_endpoint_and_not_disabled():
    assert not wanted({})
    assert not wanted({"OTEL_SERVICE_NAME": "x", "OTEL_TRACES_SAMPLER": "always_on"})
    assert wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert wanted({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"})
    on = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}
    assert not wanted({**on, "OTEL_SDK_DISABLED": "true"})
    assert not wanted({**on, "OTEL_TRACES_EXPORTER": "none"})
    assert not wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "  "})


def test_off_needs_no_opentelemetry():
    """Off, cronman's processes load without the optional package (made
    unimportable here; redis-py also looks for it, and copes) and cronman
    imports nothing of its own tracing."""
    code = """
import sys

class NoOpenTelemetry:
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ImportError(f"{name}: not installed")
        return None

sys.meta_path.insert(0, NoOpenTelemetry())
import cronman.processes.standalone, cronman.processes.scheduler, cronman.processes.api
import cronman.scheduler.node, cronman.api.app, cronman.api.jobs
from cronman.observability import tracing
assert tracing.configure("cronman-test") is None and tracing.active() is None
assert "cronman.observability.tracing_otel" not in sys.modules
assert not [m for m in sys.modules if m.startswith("opentelemetry")]
print("ok")
"""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def delivery(target, trace=()):
    return Delivery(job_id="j1", run_id="r1", scheduled_for=datetime(2026, 1, 1, tzinfo=UTC),
                    attempt=1, target=target, trace=trace)


def test_http_header_lines_carry_only_a_valid_context():
    assert trace_lines((("traceparent", TRACEPARENT), ("tracestate", "a=1,b=2"))) == (
        f"traceparent: {TRACEPARENT}\r\ntracestate: a=1,b=2\r\n".encode())
    assert trace_lines((("traceparent", "x\r\nEvil: 1"), ("other", "1"))) == b""


def test_sqs_attributes_carry_the_context_where_there_is_room():
    sqs = {"kind": "sqs", "queue_url": "http://127.0.0.1:1/q", "body": "{}"}
    got = build_send_kwargs(delivery({**sqs, "attributes": {}}, (("traceparent", TRACEPARENT),
                                                                 ("tracestate", "a=1"))))
    attrs = got["MessageAttributes"]
    assert attrs["traceparent"] == {"DataType": "String", "StringValue": TRACEPARENT}
    assert attrs["tracestate"]["StringValue"] == "a=1"
    full = {f"a{i}": "v" for i in range(7)}  # cronman's 3 and 7 of the job's: SQS's 10
    attrs = build_send_kwargs(delivery({**sqs, "attributes": full},
                                       (("traceparent", TRACEPARENT),)))["MessageAttributes"]
    assert len(attrs) == 10 and "traceparent" not in attrs
    assert "traceparent" not in build_send_kwargs(delivery(sqs))["MessageAttributes"]


def test_a_container_gets_the_context_in_its_environment():
    held = HeldRun(run_id="r1", attempt=2)
    env = run_env(held, {"job_id": "j1", "trace": {"traceparent": TRACEPARENT,
                                                   "tracestate": "a=1"}})
    assert env["TRACEPARENT"] == TRACEPARENT and env["TRACESTATE"] == "a=1"
    assert "TRACEPARENT" not in run_env(held, {"job_id": "j1"})
