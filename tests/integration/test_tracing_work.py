"""Traces of runs handed to work queues, read by a real OTLP/HTTP receiver on
loopback from a ``cronman standalone`` configured the standard way: a worker
target's run goes on past the hand-off (the claim's traceparent, in
``cronman worker``'s command environment; the API's claim, heartbeat and
report spans under the attempt), a call's own traceparent is its span's
parent or, from another trace, a link; an http target completed by callback
joins its completion call to the run's trace."""

from __future__ import annotations

import time

import pytest

from cronman.client import CronmanClient
from cronman.observability.tracing_otel import run_span_id_of, trace_id_of
from tests.integration.test_tracing import create, one, otel_env
from tests.support.api import free_port
from tests.support.otlp import OtlpReceiver
from tests.support.processes import Processes
from tests.support.receiver import Receiver
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.slow]

FAR = {"kind": "once", "at": "2099-01-01T00:00:00Z"}  # fired by a trigger only
CLAIM = "POST /v1/queues/{queue}/claim"
HEARTBEAT = "POST /v1/runs/{run_id}/heartbeat"
COMPLETE = "POST /v1/runs/{run_id}/complete"
FOREIGN = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def hex_trace(run_id: str) -> str:
    return format(trace_id_of(run_id), "032x")


def test_a_worker_command_joins_the_runs_trace(tmp_path):
    db = f"sqlite:///{tmp_path / 'cronman.db'}"
    seen = tmp_path / "seen"
    with OtlpReceiver() as otlp, Processes(tmp_path) as procs:
        sa = procs.standalone(db, env=otel_env(otlp))
        job = create(sa.url, {"name": "etl", "schedule": FAR,
                              "target": {"kind": "worker", "queue": "etl",
                                         "heartbeat_timeout": 3}})
        procs.start("worker", ["worker", "--url", sa.url, "--queue", "etl", "--",
                               "sh", "-c", f'echo "$TRACEPARENT $TRACESTATE" > {seen}.tmp; '
                                           f"mv {seen}.tmp {seen}; sleep 1.5"],
                    env={"TRACEPARENT": FOREIGN})  # the worker's own: not the command's
        with CronmanClient(sa.url) as api:
            run_id = api.trigger_job(job["id"])["id"]
            wait_for(lambda: api.get_run(run_id)["status"] == "succeeded", 20,
                     "the worker's run to succeed")
        traceparent = seen.read_text().strip()
        version, trace_id, parent_id, flags = traceparent.split("-")
        assert (version, trace_id, flags) == ("00", hex_trace(run_id), "01")

        spans = otlp.wait_for_trace(trace_id, {"cronman.run": 1, "cronman.attempt": 1,
                                               CLAIM: 1, HEARTBEAT: 1, COMPLETE: 1})
        run, attempt = one(spans, "cronman.run"), one(spans, "cronman.attempt")
        assert run.attributes["cronman.run.handed_off"] is True
        assert attempt.attributes["cronman.target.kind"] == "worker"
        assert attempt.parent_span_id == run.span_id
        assert attempt.span_id == parent_id  # the command's parent: the hand-off attempt
        claim, done = one(spans, CLAIM), one(spans, COMPLETE)
        beats = [s for s in spans if s.name == HEARTBEAT]
        # The worker sent the claim's traceparent: the API's spans hang off the attempt.
        assert {s.parent_span_id for s in (claim, done, *beats)} == {attempt.span_id}
        assert all(s.kind == 2 and s.links == [] for s in (claim, done, *beats))  # SERVER
        assert claim.attributes["cronman.queue"] == "etl"
        assert claim.attributes["cronman.attempt"] == 1
        assert claim.attributes["cronman.worker.id"]
        assert claim.attributes["cronman.queue.wait_ms"] >= 0
        assert done.attributes["cronman.report.status"] == "succeeded"
        assert done.attributes["cronman.run.status"] == "succeeded"
        assert run.end_ns <= claim.end_ns <= min(b.start_ns for b in beats)
        assert max(b.end_ns for b in beats) <= done.start_ns


def test_worker_calls_join_by_their_own_traceparent_or_link_another(tmp_path):
    db = f"sqlite:///{tmp_path / 'cronman.db'}"
    with OtlpReceiver() as otlp, Processes(tmp_path) as procs, \
            CronmanClient((sa := procs.standalone(db, env=otel_env(otlp))).url) as api:
        job = create(sa.url, {"name": "raw", "schedule": FAR,
                              "target": {"kind": "worker", "queue": "raw"}})
        run_id = api.trigger_job(job["id"])["id"]
        claim = None
        deadline = time.monotonic() + 20
        while claim is None and time.monotonic() < deadline:
            claim = api.claim("raw", "w1", wait=5)
        assert claim is not None and claim["run"]["id"] == run_id
        trace_id = hex_trace(run_id)
        assert claim["traceparent"].split("-")[1] == trace_id
        assert claim["tracestate"] is None
        token = claim["lease_token"]
        # A heartbeat from another trace: under the run's span, linked to its caller.
        api.heartbeat(run_id, token, trace={"traceparent": FOREIGN})
        # A report from a worker's own span in the run's trace: that span's child.
        own_span = "1234567890abcdef"
        api.complete(run_id, token, "failed", error="boom",
                     trace={"traceparent": f"00-{trace_id}-{own_span}-01"})
        spans = otlp.wait_for_trace(trace_id, {CLAIM: 1, HEARTBEAT: 1, COMPLETE: 1})
        beat, done = one(spans, HEARTBEAT), one(spans, COMPLETE)
        assert beat.parent_span_id == format(run_span_id_of(run_id), "016x")
        assert beat.links == [tuple(FOREIGN.split("-")[1:3])]
        assert beat.attributes["cronman.cancel_requested"] is False
        assert done.parent_span_id == own_span and done.links == []
        assert done.attributes["cronman.report.status"] == "failed"
        assert done.attributes["cronman.run.status"] == "retrying"  # the default retry policy
        assert one(spans, CLAIM).parent_span_id == claim["traceparent"].split("-")[2]


def test_a_completion_by_callback_joins_the_runs_trace(tmp_path):
    db = f"sqlite:///{tmp_path / 'cronman.db'}"
    with OtlpReceiver() as otlp, Receiver() as rx, Processes(tmp_path) as procs:
        rx.reply("/accept", status=202)
        port = free_port()  # the API's own URL, for the receiver's callbacks
        sa = procs.standalone(db, port=port, env=otel_env(
            otlp, CRONMAN_PUBLIC_URL=f"http://127.0.0.1:{port}"))
        job = create(sa.url, {"name": "callback", "schedule": FAR,
                              "target": {"kind": "http", "url": rx.url("/accept"),
                                         "completion": "callback"}})
        with CronmanClient(sa.url) as api:
            run_id = api.trigger_job(job["id"])["id"]
            [req] = rx.wait_for(1, timeout=20, path="/accept")[:1]
            traceparent = req.header("traceparent")
            assert traceparent.split("-")[1] == hex_trace(run_id)
            api.complete(run_id, req.header("Cronman-Lease-Token"), "succeeded",
                         result={"rows": 3}, trace={"traceparent": traceparent})
            assert api.get_run(run_id)["status"] == "succeeded"
        spans = otlp.wait_for_trace(hex_trace(run_id), {"cronman.run": 1, "cronman.attempt": 1,
                                                        COMPLETE: 1})
        attempt, done = one(spans, "cronman.attempt"), one(spans, COMPLETE)
        assert attempt.attributes["cronman.target.kind"] == "http"
        assert traceparent.split("-")[2] == attempt.span_id
        assert done.parent_span_id == attempt.span_id
        assert done.attributes["cronman.run.status"] == "succeeded"
