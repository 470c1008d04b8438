"""Traces across processes, read by a real OTLP/HTTP receiver on loopback:
``cronman api`` (gunicorn) and a ``cronman scheduler`` node on PostgreSQL and
Redis, each exporting its own spans under a service name of its own (OTEL_*
variables), and a ``cronman agent`` (process runtime, which exports no
spans) running the node's container runs. A run triggered through the API
is one trace from the API's span to the node's run, claim, attempt and
result write, and its callback carries that trace: an HTTP receiver's
``traceparent`` header, an SQS message's attributes (moto's server), a
container command's ``TRACEPARENT``."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass

import boto3
import pytest

from cronman.client import CronmanClient
from cronman.observability.tracing_otel import request_span_id_of, trace_id_of
from cronman.protocol import ATTR_RUN_ID
from cronman.store import open_store
from cronman.vocabulary import FINAL_STATUSES
from tests.integration.test_tracing import RUN_SPANS, one, otel_env
from tests.support.api import running_api
from tests.support.databases import migrated_pg_database
from tests.support.moto import AWS_TEST_ENV, MotoServer, moto_server
from tests.support.otlp import OtlpReceiver, ReceivedSpan
from tests.support.processes import READY_LINE, Processes
from tests.support.receiver import Receiver
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

FAR = {"kind": "once", "at": "2099-01-01T00:00:00Z"}  # fired by a trigger only
TRIGGER = "POST /v1/jobs/{job_id}/trigger"
API_SERVICE, NODE_SERVICE = "cronman-api", "cronman-scheduler"
REGION = AWS_TEST_ENV["AWS_DEFAULT_REGION"]
HOSTED = "hosted"  # the namespace whose container runs the process agent may run


@dataclass
class TracedCluster:
    """The API's URL and what the processes send to."""

    api: str
    otlp: OtlpReceiver
    rx: Receiver
    moto: MotoServer


@pytest.fixture(scope="module")
def traced(tmp_path_factory, redis_url) -> Iterator[TracedCluster]:
    """One API, one node and one process agent for the module's tests."""
    base = tmp_path_factory.mktemp("traced")
    shared = {"CRONMAN_REDIS_URL": redis_url,
              "CRONMAN_REDIS_KEY_PREFIX": f"t{uuid.uuid4().hex[:8]}",
              "CRONMAN_ALLOW_PRIVATE_TARGETS": "true"}
    with ExitStack() as stack:
        otlp = stack.enter_context(OtlpReceiver())
        rx = stack.enter_context(Receiver())
        moto = stack.enter_context(moto_server())
        db = stack.enter_context(migrated_pg_database())
        # The process runtime runs a namespace's commands only once granted.
        with open_store(db) as store:
            store.host_policies.put(HOSTED, {"process": True}, by=None)
        procs = stack.enter_context(Processes(base))
        # The node and the agent start while the API does; waited for after.
        node = procs.scheduler(db, "traced-n1", redis_url=redis_url, wait=False, env={
            **shared, **AWS_TEST_ENV, **otel_env(otlp, OTEL_SERVICE_NAME=NODE_SERVICE)})
        agent = procs.agent("traced-a1", redis_url=redis_url, runtime="process", wait=False,
                            env=shared)
        api = stack.enter_context(running_api(
            db, extra_env={**shared, **otel_env(otlp, OTEL_SERVICE_NAME=API_SERVICE)},
            log_path=base / "api.log", startup_timeout=60))
        node.wait_for_log(READY_LINE, timeout=60)
        agent.wait_for_log("agent traced-a1 ready", timeout=60)
        yield TracedCluster(api, otlp, rx, moto)


def trigger(traced: TracedCluster, spec: dict) -> tuple[str, str]:
    """Create a job through the API and trigger it: (run id, its trace id in hex)."""
    with CronmanClient(traced.api) as api:
        job = api.create_job({"schedule": FAR, **spec})
        run_id = api.trigger_job(job["id"])["id"]
    return run_id, format(trace_id_of(run_id), "032x")


def across_processes(traced: TracedCluster, trace_id: str, kind: str) -> ReceivedSpan:
    """Check the run's trace: the API's span its root, the node's spans under
    it; returns the node's attempt span."""
    spans = traced.otlp.wait_for_trace(trace_id, {TRIGGER: 1, **RUN_SPANS}, timeout=25)
    api = one(spans, TRIGGER)
    run, claim = one(spans, "cronman.run"), one(spans, "cronman.claim")
    attempt, write = one(spans, "cronman.attempt"), one(spans, "cronman.result_write")
    assert api.service == API_SERVICE
    assert {s.service for s in (run, claim, attempt, write)} == {NODE_SERVICE}
    assert api.parent_span_id == "" and api.kind == 2  # SPAN_KIND_SERVER
    assert run.parent_span_id == api.span_id
    assert {s.parent_span_id for s in (claim, attempt, write)} == {run.span_id}
    assert run.attributes["cronman.run.origin"] == "trigger"
    assert run.attributes["cronman.run.status"] == "succeeded"
    assert attempt.attributes["cronman.target.kind"] == kind
    assert attempt.attributes["cronman.attempt"] == 1
    return attempt


def test_an_api_call_and_the_nodes_run_are_one_trace(traced):
    run_id, trace_id = trigger(traced, {"name": "http-traced", "namespace": "shop",
                                        "target": {"kind": "http",
                                                   "url": traced.rx.url("/hook")}})
    [req] = traced.rx.wait_for(1, timeout=20, path="/hook")[:1]
    assert req.header("Cronman-Run-Id") == run_id
    version, got_trace, parent_id, flags = req.header("traceparent").split("-")
    assert (version, got_trace, flags) == ("00", trace_id, "01")
    attempt = across_processes(traced, trace_id, "http")
    assert attempt.span_id == parent_id  # the receiver's parent: the node's attempt
    api = one(traced.otlp.trace(trace_id), TRIGGER)
    assert api.span_id == format(request_span_id_of(run_id), "016x")


def test_an_sqs_message_carries_the_runs_trace_context(traced):
    sqs = boto3.client("sqs", region_name=REGION, endpoint_url=traced.moto.endpoint_url,
                       aws_access_key_id="testing", aws_secret_access_key="testing")
    queue_url = sqs.create_queue(QueueName=f"traced-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    run_id, trace_id = trigger(traced, {"name": "sqs-traced", "target": {
        "kind": "sqs", "queue_url": queue_url, "region": REGION,
        "endpoint_url": traced.moto.endpoint_url, "body": "hello"}})

    def received():
        got = sqs.receive_message(QueueUrl=queue_url, MessageAttributeNames=["All"],
                                  WaitTimeSeconds=1)
        return got.get("Messages")

    [message] = wait_for(received, 20, "the SQS message")
    attrs = {k: v["StringValue"] for k, v in message["MessageAttributes"].items()}
    assert message["Body"] == "hello" and attrs[ATTR_RUN_ID] == run_id, attrs
    version, got_trace, parent_id, flags = attrs["traceparent"].split("-")
    assert (version, got_trace, flags) == ("00", trace_id, "01")
    attempt = across_processes(traced, trace_id, "sqs")
    assert attempt.span_id == parent_id


def test_a_container_command_on_an_agent_sees_the_runs_traceparent(traced):
    with CronmanClient(traced.api) as api:
        run_id, trace_id = trigger(traced, {"name": "container-traced", "namespace": HOSTED,
                                            "target": {"kind": "container", "image": "unused",
                                                       "command": ["sh", "-c",
                                                                   'echo "$TRACEPARENT"']}})

        def ended():
            run = api.get_run(run_id)
            return run if run["status"] in FINAL_STATUSES else None

        run = wait_for(ended, 20, "the container run to end")
    assert run["status"] == "succeeded", run
    assert run["result"]["agent_id"] == "traced-a1"
    version, got_trace, parent_id, flags = run["result"]["logs_tail"]["stdout"].split("-")
    assert (version, got_trace, flags.strip()) == ("00", trace_id, "01")
    attempt = across_processes(traced, trace_id, "container")
    assert attempt.span_id == parent_id
