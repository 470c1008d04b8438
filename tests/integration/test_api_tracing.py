"""The API with tracing on (in-process, exporting to a real OTLP/HTTP
receiver on loopback): a trigger is its run's trace's root, linked to the
caller's traceparent, a replay a span in the run's trace, and the records
logged while answering a request about a run carry that run's trace and
span ids."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from cronman.config import Settings
from cronman.ids import run_id_for
from cronman.models import Run, RunUpdate
from cronman.observability import logs, tracing
from cronman.observability.tracing_otel import request_span_id_of, run_span_id_of, trace_id_of
from cronman.processes.api import make_app
from cronman.timeutil import utcnow
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


def finished_run(store, job_id: str) -> str:
    """A run a node claimed and failed a minute ago."""
    at = utcnow().replace(microsecond=0) - timedelta(minutes=1)
    run = Run(id=run_id_for(job_id, at), job_id=job_id, scheduled_for=at, status="claimed",
              attempt=1, node_id="sched-1", claimed_at=at, lease_expires_at=at)
    assert store.runs.claim_runs([run]) == {run.id}
    store.runs.write_run_updates([RunUpdate(id=run.id, scheduled_for=at, status="failed",
                                            finished_at=at, error="HTTP 500")])
    return run.id


def test_a_replay_is_a_span_in_its_runs_trace(traced_client, store):
    client, otlp, kept = traced_client
    job = client.post("/v1/jobs", json=job_spec(name="replayed")).get_json()
    run_id = finished_run(store, job["id"])
    resp = client.post(f"/v1/runs/{run_id}/replay",
                       headers={"traceparent": f"00-{CALLER[0]}-{CALLER[1]}-01"})
    assert resp.status_code == 202 and resp.get_json()["attempt"] == 2
    trace_id = format(trace_id_of(run_id), "032x")
    replay_span = format(request_span_id_of(run_id, 2), "016x")
    record = kept.records[-1]
    assert (record.run_id, record.trace_id, record.span_id) == (run_id, trace_id, replay_span)
    assert client.post(f"/v1/runs/{run_id}/replay").status_code == 409  # in flight: no span

    tracing.shutdown()
    [span] = otlp.trace(trace_id)
    assert span.name == "POST /v1/runs/{run_id}/replay" and span.span_id == replay_span
    assert span.parent_span_id == "" and span.links == [CALLER]
    assert span.kind == 2  # SPAN_KIND_SERVER
    assert span.attributes["cronman.run.id"] == run_id
    assert span.attributes["cronman.job.id"] == job["id"]
    assert span.attributes["http.route"] == "/v1/runs/{run_id}/replay"
