"""The API with tracing on (in-process, exporting to a real OTLP/HTTP
receiver on loopback): a trigger is its run's trace's root, linked to the
caller's traceparent, and the records logged while answering a request
about a run carry that run's trace and span ids."""

from __future__ import annotations

import logging

import pytest

from cronman.config import Settings
from cronman.observability import logs, tracing
from cronman.observability.tracing_otel import request_span_id_of, run_span_id_of, trace_id_of
from cronman.processes.api import make_app
from tests.support.api import job_spec
from tests.support.otlp import OtlpReceiver

CALLER = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")


class Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []
        self.addFilter(logs.ContextFilter())

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def traced_client(store, database_url, monkeypatch):
    with OtlpReceiver() as otlp:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.endpoint)
        monkeypatch.setenv("OTEL_SERVICE_NAME", "cronman-api-test")
        monkeypatch.setattr(tracing, "_active", None)
        app = make_app(Settings(database_url=database_url), store=store)
        assert tracing.active() is not None
        probe = logging.getLogger("cronman.test.probe")
        kept = Kept()
        probe.addHandler(kept)

        @app.after_request
        def _log(response):  # a record logged while the request is answered
            probe.warning("answered")
            return response

        try:
            yield app.test_client(), otlp, kept
        finally:
            probe.removeHandler(kept)
            tracing.shutdown()


def test_a_trigger_roots_its_runs_trace_and_logs_carry_it(traced_client):
    client, otlp, kept = traced_client
    job = client.post("/v1/jobs", json=job_spec(name="traced")).get_json()
    resp = client.post(f"/v1/jobs/{job['id']}/trigger",
                       headers={"traceparent": f"00-{CALLER[0]}-{CALLER[1]}-01"})
    assert resp.status_code == 202
    run_id = resp.get_json()["id"]
    trace_id = format(trace_id_of(run_id), "032x")
    request_span = format(request_span_id_of(run_id), "016x")
    record = kept.records[-1]
    assert (record.run_id, record.trace_id, record.span_id) == (run_id, trace_id, request_span)

    client.get(f"/v1/runs/{run_id}")
    record = kept.records[-1]
    assert (record.run_id, record.trace_id, record.span_id) == (
        run_id, trace_id, format(run_span_id_of(run_id), "016x"))
    client.get(f"/v1/jobs/{job['id']}")  # about no run: no trace
    assert not hasattr(kept.records[-1], "trace_id")

    tracing.shutdown()  # exports what is left
    [span] = otlp.trace(trace_id)
    assert span.name == "POST /v1/jobs/{job_id}/trigger" and span.span_id == request_span
    assert span.parent_span_id == "" and span.links == [CALLER]
    assert span.service == "cronman-api-test"
    assert span.attributes["cronman.run.id"] == run_id
    assert span.attributes["http.route"] == "/v1/jobs/{job_id}/trigger"


def test_a_backfill_roots_each_new_runs_trace(traced_client):
    client, otlp, _ = traced_client
    job = client.post("/v1/jobs", json=job_spec(
        name="filled", schedule={"kind": "cron", "cron": "* * * * *"})).get_json()
    resp = client.post(f"/v1/jobs/{job['id']}/backfill",
                       json={"since": "2026-01-01T00:00:00Z", "until": "2026-01-01T00:03:00Z"},
                       headers={"traceparent": f"00-{CALLER[0]}-{CALLER[1]}-01"})
    assert resp.status_code == 202 and resp.get_json()["requested"] >= 2
    runs = client.get(f"/v1/jobs/{job['id']}/runs?since=2026-01-01T00:00:00Z"
                      "&until=2026-01-01T00:03:01Z").get_json()["items"]
    assert len(runs) == resp.get_json()["requested"]
    again = client.post(f"/v1/jobs/{job['id']}/backfill",
                        json={"since": "2026-01-01T00:00:00Z",
                              "until": "2026-01-01T00:03:00Z"})
    assert again.get_json()["requested"] == 0  # no new run: no span
    tracing.shutdown()
    for run in runs:
        [span] = otlp.trace(format(trace_id_of(run["id"]), "032x"))
        assert span.name == "POST /v1/jobs/{job_id}/backfill"
        assert span.span_id == format(request_span_id_of(run["id"]), "016x")
        assert span.links == [CALLER] and span.attributes["cronman.run.id"] == run["id"]
