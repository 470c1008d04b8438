"""Traces of runs, read by a real OTLP/HTTP receiver on loopback from a
``cronman standalone`` configured the standard way (OTEL_* variables): one
fire end to end (run, claim, attempt, result write), the traceparent the
callback carried, the API call that triggered a run as its trace's root,
failed attempts, a replay's API call as the parent of its new run span, and JSON logs carrying the run's trace and span ids."""

from __future__ import annotations

import json
import urllib.request

import pytest

from cronman.observability.tracing_otel import request_span_id_of, run_span_id_of, trace_id_of
from tests.support.api import http
from tests.support.otlp import OtlpReceiver
from tests.support.processes import Processes
from tests.support.receiver import Receiver
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.slow]

RUN_SPANS = {"cronman.run": 1, "cronman.claim": 1, "cronman.attempt": 1,
             "cronman.result_write": 1}


def otel_env(otlp: OtlpReceiver, **more: str) -> dict[str, str]:
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": otlp.endpoint, "OTEL_SERVICE_NAME": "cronman-test",
            "OTEL_BSP_SCHEDULE_DELAY": "100", "CRONMAN_LOG_FORMAT": "json", **more}


def create(base: str, spec: dict) -> dict:
    status, job, _ = http("POST", f"{base}/v1/jobs", spec)
    assert status == 201, job
    return job


def one(spans, name):
    [span] = [s for s in spans if s.name == name]
    return span


def test_a_fire_is_one_trace_joined_by_its_receiver(tmp_path):
    db = f"sqlite:///{tmp_path / 'cronman.db'}"
    with OtlpReceiver() as otlp, Receiver() as rx, Processes(tmp_path) as procs:
        sa = procs.standalone(db, env=otel_env(otlp))
        job = create(sa.url, {"name": "traced", "namespace": "shop",
                              "schedule": {"kind": "interval", "every": 1},
                              "target": {"kind": "http", "url": rx.url("/hook")}})
        [req] = rx.wait_for(1, timeout=10, path="/hook")[:1]
        run_id = req.header("Cronman-Run-Id")
        version, trace_id, parent_id, flags = req.header("traceparent").split("-")
        assert (version, flags) == ("00", "01")
        assert trace_id == format(trace_id_of(run_id), "032x")

        spans = otlp.wait_for_trace(trace_id, RUN_SPANS)
        assert {s.service for s in spans} == {"cronman-test"}
        run, claim = one(spans, "cronman.run"), one(spans, "cronman.claim")
        attempt, write = one(spans, "cronman.attempt"), one(spans, "cronman.result_write")
        # The receiver's parent is the attempt; everything hangs off the run's span.
        assert attempt.span_id == parent_id
        assert run.parent_span_id == ""
        assert {s.parent_span_id for s in (claim, attempt, write)} == {run.span_id}
        assert run.attributes["cronman.run.id"] == run_id
        assert run.attributes["cronman.job.id"] == job["id"]
        assert run.attributes["cronman.namespace"] == "shop"
        assert run.attributes["cronman.run.origin"] == "schedule"
        assert run.attributes["cronman.run.status"] == "succeeded"
        assert attempt.attributes["cronman.target.kind"] == "http"
        assert attempt.attributes["cronman.attempt"] == 1
        assert attempt.attributes["cronman.run.status"] == "succeeded"
        assert 0 <= attempt.attributes["cronman.lateness_ms"] < 1000
        assert attempt.kind == 3  # SPAN_KIND_CLIENT
        # In order: claimed, attempted (while the receiver had it), written.
        assert claim.end_ns <= attempt.start_ns <= req.arrived_at * 1e9 <= attempt.end_ns
        assert attempt.end_ns <= write.end_ns <= run.end_ns
        assert run.start_ns == claim.start_ns
        assert write.attributes["cronman.run.status"] == "succeeded"


def test_a_triggered_run_starts_at_its_api_call_and_failures_are_marked(tmp_path):
    db = f"sqlite:///{tmp_path / 'cronman.db'}"
    caller_trace, caller_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    with OtlpReceiver() as otlp, Processes(tmp_path) as procs:
        sa = procs.standalone(db, env=otel_env(otlp))
        job = create(sa.url, {"name": "refused", "namespace": "billing",
                              "schedule": {"kind": "cron", "cron": "0 0 1 1 *"},
                              "target": {"kind": "http", "url": "http://127.0.0.1:9/x"},
                              "retry": {"max_attempts": 2, "min_backoff": 0.1,
                                        "max_backoff": 0.1}})
        req = urllib.request.Request(
            f"{sa.url}/v1/jobs/{job['id']}/trigger", method="POST", data=b"",
            headers={"traceparent": f"00-{caller_trace}-{caller_span}-01"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 202
            run_id = json.loads(resp.read())["id"]
        trace_id = format(trace_id_of(run_id), "032x")
        spans = otlp.wait_for_trace(trace_id, {
            "POST /v1/jobs/{job_id}/trigger": 1, "cronman.run": 1, "cronman.claim": 1,
            "cronman.attempt": 2, "cronman.result_write": 1})
        api = one(spans, "POST /v1/jobs/{job_id}/trigger")
        run = one(spans, "cronman.run")
        # The node's take of the requested run is its claim.
        assert one(spans, "cronman.claim").parent_span_id == run.span_id
        assert api.parent_span_id == "" and api.span_id == format(request_span_id_of(run_id),
                                                                  "016x")
        assert api.links == [(caller_trace, caller_span)]
        assert api.kind == 2  # SPAN_KIND_SERVER
        assert api.attributes["cronman.job.id"] == job["id"]
        assert run.parent_span_id == api.span_id
        assert run.attributes["cronman.run.origin"] == "trigger"
        assert run.attributes["cronman.run.status"] == "failed"
        assert run.status_code == 2
        attempts = sorted((s for s in spans if s.name == "cronman.attempt"),
                          key=lambda s: s.start_ns)
        assert [a.attributes["cronman.attempt"] for a in attempts] == [1, 2]
        assert [a.attributes["cronman.run.status"] for a in attempts] == ["retrying", "failed"]
        assert all(a.status_code == 2 and a.parent_span_id == run.span_id for a in attempts)

        # The attempts' log lines carry the run's trace and the attempt's span.
        def lines():
            out = []
            for line in sa.log_text().splitlines():
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if record.get("run_id") == run_id and "trace_id" in record:
                    out.append(record)
            return out

        records = wait_for(lines, 10, "log lines of the run with its trace")
        assert {r["trace_id"] for r in records} == {trace_id}
        assert {r["span_id"] for r in records} <= {a.span_id for a in attempts}

        # Its replay continues the trace: the API call, then the node's new run span.
        status, replayed, _ = http("POST", f"{sa.url}/v1/runs/{run_id}/replay")
        assert status == 202 and replayed["attempt"] == 3, replayed
        spans = otlp.wait_for_trace(trace_id, {"POST /v1/runs/{run_id}/replay": 1,
                                               "cronman.run": 2})
        replay = one(spans, "POST /v1/runs/{run_id}/replay")
        assert replay.span_id == format(request_span_id_of(run_id, 3), "016x")
        [again] = [s for s in spans if s.name == "cronman.run" and s.span_id != run.span_id]
        assert again.parent_span_id == replay.span_id
        assert again.attributes["cronman.run.origin"] == "replay"


def test_a_ratio_sampler_keeps_or_drops_each_run_whole(tmp_path):
    """The API and the node decide alike on a run's derived trace id."""
    db = f"sqlite:///{tmp_path / 'cronman.db'}"
    with OtlpReceiver() as otlp, Receiver() as rx, Processes(tmp_path) as procs:
        sa = procs.standalone(db, env=otel_env(otlp, OTEL_TRACES_SAMPLER="traceidratio",
                                               OTEL_TRACES_SAMPLER_ARG="0.5"))
        job = create(sa.url, {"name": "sampled", "schedule": {"kind": "cron",
                                                              "cron": "0 0 1 1 *"},
                              "target": {"kind": "http", "url": rx.url("/hook")}})
        run_ids = []
        while len(run_ids) < 16:
            status, run, _ = http("POST", f"{sa.url}/v1/jobs/{job['id']}/trigger")
            if status == 202:  # 409: a trigger in the same millisecond
                run_ids.append(run["id"])
        got = rx.wait_for(16, timeout=20, path="/hook")
        sampled_flags = {r.header("Cronman-Run-Id"): r.header("traceparent")[-2:] for r in got}
        traces = {run_id: format(trace_id_of(run_id), "032x") for run_id in run_ids}
        kept = {run_id for run_id, flag in sampled_flags.items() if flag == "01"}
        assert 0 < len(kept) < 16, sampled_flags
        for run_id in kept:
            otlp.wait_for_trace(traces[run_id], {"POST /v1/jobs/{job_id}/trigger": 1,
                                                 "cronman.run": 1, "cronman.attempt": 1,
                                                 "cronman.result_write": 1})
        # The dropped runs left nothing, the API's span included.
        assert {s.trace_id for s in otlp.spans} == {traces[r] for r in kept}


# A downstream job, the gate entry naming the upstream run, and its run's origin.
DOWNSTREAM = {
    "after": ({"schedule": {"kind": "after", "jobs": ["features"]}}, "upstream", "upstream"),
    "depends_on": ({"schedule": {"kind": "interval", "every": 1},
                    "depends_on": [{"job": "features", "within": 3600, "wait": 10}]},
                   "depends_on", "schedule"),
}


@pytest.mark.parametrize("how", sorted(DOWNSTREAM))
def test_a_downstream_run_links_to_the_upstream_run_it_consumed(tmp_path, how):
    """``after``: the run the chain's trigger consumed; ``depends_on``: the fresh one it found."""
    spec, gate_key, origin = DOWNSTREAM[how]
    db = f"sqlite:///{tmp_path / 'cronman.db'}"
    with OtlpReceiver() as otlp, Receiver() as rx, Processes(tmp_path) as procs:
        sa = procs.standalone(db, env=otel_env(otlp))
        create(sa.url, {"name": "features", "schedule": {"kind": "interval", "every": 1},
                        "target": {"kind": "http", "url": rx.url("/up")}})
        down = create(sa.url, {"name": "train", **spec,
                               "target": {"kind": "http", "url": rx.url("/down")}})
        [req] = rx.wait_for(1, timeout=20, path="/down")[:1]
        run_id = req.header("Cronman-Run-Id")

        def consumed():
            _, page, _ = http("GET", f"{sa.url}/v1/jobs/{down['id']}/runs")
            return [e["run_id"] for r in page["items"] if r["id"] == run_id
                    for e in (r.get("gate") or {}).get(gate_key, [])]

        [up_run] = wait_for(consumed, 10, "the downstream run's upstream")
        trace_id = format(trace_id_of(run_id), "032x")
        run = one(otlp.wait_for_trace(trace_id, {"cronman.run": 1}), "cronman.run")
        up_trace, up_span = format(trace_id_of(up_run), "032x"), format(run_span_id_of(up_run),
                                                                         "016x")
        assert run.links == [(up_trace, up_span)]
        assert run.attributes["cronman.run.origin"] == origin
        # The link resolves: the upstream run's own span has that id.
        up = one(otlp.wait_for_trace(up_trace, {"cronman.run": 1}), "cronman.run")
        assert up.span_id == up_span
