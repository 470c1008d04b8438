"""http targets with ``"completion": "callback"`` on PostgreSQL and SQLite: a
scheduler node in-process (real http target, in-process coordinator), the
API served on a real socket, and real local receivers: one that answers 202
and completes from another thread a few seconds later (the receiver
helpers), one that answers 202 and never calls back (lease lapse: retried as
attempt 2, or ``lost`` under at_most_once), one that answers 200 (a normal
success) and one that answers 500 (a normal failed attempt); a stale token
is a 409; bad field values are 400s naming the field."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from werkzeug.serving import make_server

from cronman.callbacks import build_targets
from cronman.client import ConflictError, CronmanClient
from cronman.config import Settings
from cronman.coordination.memory import InProcessCoordinator
from cronman.processes.api import make_app
from cronman.receiver import CompletionReport, InvalidCallback, completion_lease
from cronman.scheduler.node import SchedulerNode
from cronman.timeutil import utcnow
from tests.support.api import free_port, job_spec
from tests.support.receiver import Receiver
from tests.support.signing import callback_verifies

SECRET = "cluster-secret"
FAR = {"kind": "once", "at": "2099-01-01T00:00:00Z"}  # fired by a trigger only
FINAL = ("succeeded", "failed", "lost")


class Setup:
    """The API on a real port, a node, and a receiver, over one store."""

    def __init__(self, api_url: str, store: Any, receiver: Receiver) -> None:
        self.url = api_url
        self.api = CronmanClient(api_url)
        self.store = store
        self.rx = receiver

    def job(self, path: str, *, retry: dict | None = None, delivery: str = "at_least_once",
            heartbeat_timeout: int = 2, completion_timeout: int = 60) -> dict[str, Any]:
        target = {"kind": "http", "url": self.rx.url(path), "timeout": 2,
                  "completion": "callback", "heartbeat_timeout": heartbeat_timeout,
                  "completion_timeout": completion_timeout}
        spec = job_spec(f"cb-{uuid.uuid4().hex[:8]}", schedule=FAR, target=target,
                        retry=retry or {"max_attempts": 1}, delivery=delivery)
        return dict(self.api.create_job(spec))

    def trigger(self, job: dict[str, Any]) -> str:
        return str(self.api.trigger_job(job["id"])["id"])

    def run(self, run_id: str) -> dict[str, Any]:
        return dict(self.api.get_run(run_id))

    def until(self, run_id: str, check: Any, timeout: float = 20.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            run = self.run(run_id)
            if check(run):
                return run
            assert time.monotonic() < deadline, f"run {run_id} stayed {run}"
            time.sleep(0.1)

    def ended(self, run_id: str, timeout: float = 20.0) -> dict[str, Any]:
        return self.until(run_id, lambda r: r["status"] in FINAL, timeout)


@pytest.fixture
def setup(store, database_url) -> Iterator[Setup]:
    port = free_port()
    api_url = f"http://127.0.0.1:{port}"
    app = make_app(Settings(database_url=database_url, public_url=api_url), store=store)
    server = make_server("127.0.0.1", port, app, threaded=True)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    settings = Settings(database_url=database_url, node_id="n1", lease_seconds=3.0,
                        heartbeat_ttl=2.0, replicas=1, allow_private_targets=True,
                        signing_secret=SECRET, public_url=api_url)
    node = SchedulerNode(settings, store, InProcessCoordinator(ttl=2.0),
                         build_targets(settings), registry=CollectorRegistry(),
                         run_maintenance=False, sweep_interval=0.3, requested_poll=0.2)
    loop = asyncio.new_event_loop()
    running = threading.Thread(target=loop.run_until_complete, args=(node.main(),),
                               daemon=True)
    running.start()
    assert node.ready.wait(15)
    try:
        with Receiver() as rx:
            yield Setup(api_url, store, rx)
    finally:
        loop.call_soon_threadsafe(node.request_stop)
        running.join(15)
        loop.close()
        server.shutdown()


def test_a_202_leaves_the_run_running_until_the_receiver_completes_it(setup):
    setup.rx.reply("/accept", status=202)
    job = setup.job("/accept")
    run_id = setup.trigger(job)
    (req,) = setup.rx.wait_for(1, timeout=10)
    # Signed as every callback; the completion's URLs are the API's.
    assert callback_verifies(SECRET, "default", req, setup.rx.url("/accept"))
    assert req.header("Cronman-Completion-Url") == f"{setup.url}/v1/runs/{run_id}/complete"
    assert req.header("Cronman-Heartbeat-Url") == f"{setup.url}/v1/runs/{run_id}/heartbeat"
    lease = completion_lease(req.headers, api_url=setup.url)
    assert lease.run_id == run_id and len(lease.lease_token) >= 32
    report = CompletionReport(lease, setup.url)
    done: dict[str, Any] = {}

    def later() -> None:  # the receiver's own thread, a few seconds after its 202
        time.sleep(1.5)
        done["cancel"] = report.heartbeat(progress="half way", percent=50)
        time.sleep(1.5)
        done["run"] = report.succeeded({"rows": 3})

    worker = threading.Thread(target=later)
    worker.start()
    running = setup.until(run_id, lambda r: (r.get("worker") or {}).get("progress"), 10)
    assert running["status"] == "running"
    worker.join(10)
    assert done["cancel"] is False
    run = setup.ended(run_id)
    assert (run["status"], run["attempt"]) == ("succeeded", 1)
    assert run["result"] == {"rows": 3, "worker_id": "http:127.0.0.1"}
    assert setup.store.work.items([run_id], now=utcnow()) == {}
    # The lease is gone: a second report is refused and changes nothing.
    with pytest.raises(ConflictError) as stale:
        report.failed("late")
    assert stale.value.code == "stale_lease"
    assert setup.run(run_id)["status"] == "succeeded"
    assert len(setup.rx.requests) == 1  # sent once


def test_a_202_never_called_back_is_retried_as_attempt_2_with_a_new_lease(setup):
    setup.rx.reply("/silent", status=202)
    job = setup.job("/silent", heartbeat_timeout=1,
                    retry={"max_attempts": 2, "min_backoff": 1, "max_backoff": 1})
    run_id = setup.trigger(job)
    (first,) = setup.rx.wait_for(1, timeout=10)
    setup.rx.reply("/silent", status=200)  # the second attempt is answered at once
    second = setup.rx.wait_for(2, timeout=20)[1]
    assert second.header("Cronman-Attempt") == "2" and first.header("Cronman-Attempt") == "1"
    assert second.header("Cronman-Lease-Token") != first.header("Cronman-Lease-Token")
    run = setup.ended(run_id)
    assert (run["status"], run["attempt"], run["result"]["http_status"]) == ("succeeded", 2, 200)
    # The first attempt's lease is stale.
    report = CompletionReport(completion_lease(first.headers, api_url=setup.url), setup.url)
    with pytest.raises(ConflictError):
        report.succeeded()


def test_a_202_never_called_back_is_lost_under_at_most_once(setup):
    setup.rx.reply("/gone", status=202)
    job = setup.job("/gone", heartbeat_timeout=1, delivery="at_most_once",
                    retry={"max_attempts": 3, "min_backoff": 1, "max_backoff": 1})
    run = setup.ended(setup.trigger(job), 20)
    assert run["status"] == "lost" and run["attempt"] == 1
    assert "lease lost: no heartbeat for 1 s from the receiver (http:127.0.0.1)" in run["error"]
    assert len(setup.rx.requests) == 1


def test_another_2xx_is_a_normal_success_and_a_failure_a_normal_failed_attempt(setup):
    setup.rx.reply("/ok", status=200, body="done")
    ok = setup.ended(setup.trigger(setup.job("/ok")))
    assert (ok["status"], ok["result"]) == ("succeeded", {"http_status": 200,
                                                          "response_snippet": "done"})
    setup.rx.reply("/bad", status=500)
    bad_job = setup.job("/bad", retry={"max_attempts": 2, "min_backoff": 1, "max_backoff": 1})
    bad = setup.ended(setup.trigger(bad_job))
    assert (bad["status"], bad["attempt"], bad["error"]) == ("failed", 2, "HTTP 500")
    tokens = {r.header("Cronman-Lease-Token") for r in setup.rx.requests_for("/bad")}
    assert len(tokens) == 2  # each attempt its own lease
    assert setup.store.work.items([ok["id"], bad["id"]], now=utcnow()) == {}


def test_a_cancel_reaches_the_receiver_on_its_heartbeat(setup):
    setup.rx.reply("/long", status=202)
    run_id = setup.trigger(setup.job("/long"))
    (req,) = setup.rx.wait_for(1, timeout=10)
    report = CompletionReport(completion_lease(req.headers, api_url=setup.url), setup.url)
    setup.until(run_id, lambda r: r.get("worker") is not None, 10)
    setup.api.request("POST", f"/v1/runs/{run_id}/cancel", {"reason": "enough"})
    assert report.heartbeat() is True
    report.failed("stopped")
    run = setup.ended(run_id)
    assert run["status"] == "failed" and run["error"] == "cancelled: enough (stopped)"


def test_the_receiver_helper_refuses_urls_of_another_api():
    headers = {"Cronman-Run-Id": "r1", "Cronman-Lease-Token": "t",
               "Cronman-Completion-Url": "http://evil.example/v1/runs/r1/complete",
               "Cronman-Heartbeat-Url": "http://api.example/v1/runs/r1/heartbeat"}
    with pytest.raises(InvalidCallback) as refused:
        completion_lease(headers, api_url="http://api.example")
    assert "Cronman-Completion-Url" in refused.value.reason
    with pytest.raises(InvalidCallback):
        completion_lease({"Cronman-Run-Id": "r1"}, api_url="http://api.example")
    headers["Cronman-Completion-Url"] = "HTTP://API.example:80/v1/runs/r1/complete"
    assert completion_lease(headers, api_url="http://api.example/").run_id == "r1"


@pytest.mark.parametrize(("target", "field"), [
    ({"completion": "later"}, "target.completion"),
    ({"completion": "callback", "heartbeat_timeout": 0}, "target.heartbeat_timeout"),
    ({"completion": "callback", "heartbeat_timeout": "5"}, "target.heartbeat_timeout"),
    ({"completion": "callback", "completion_timeout": 10 ** 9}, "target.completion_timeout"),
    ({"heartbeat_timeout": 5}, "target.heartbeat_timeout"),
    ({"completion": "response", "completion_timeout": 5}, "target.completion_timeout"),
])
def test_bad_completion_fields_are_400s_naming_the_field(store, database_url, target, field):
    client = make_app(Settings(database_url=database_url, public_url="http://127.0.0.1:1"),
                      store=store).test_client()
    spec = job_spec(target={"kind": "http", "url": "http://127.0.0.1:9/x", **target})
    resp = client.post("/v1/jobs", json=spec)
    assert resp.status_code == 400, resp.get_json()
    assert resp.get_json()["error"]["field"] == field


def test_completion_by_callback_needs_a_public_url(store, database_url):
    client = make_app(Settings(database_url=database_url), store=store).test_client()
    spec = job_spec(target={"kind": "http", "url": "http://127.0.0.1:9/x",
                            "completion": "callback"})
    resp = client.post("/v1/jobs", json=spec)
    assert resp.status_code == 400
    error = resp.get_json()["error"]
    assert error["field"] == "target.completion" and "CRONMAN_PUBLIC_URL" in error["message"]
    bulk = client.post("/v1/jobs/bulk", json={"jobs": [job_spec("a"), spec]})
    assert bulk.get_json()["error"]["field"] == "jobs[1].target.completion"
    plain = client.post("/v1/jobs", json=job_spec(target={"kind": "http",
                                                          "url": "http://127.0.0.1:9/x"}))
    assert plain.status_code == 201
    assert "completion" not in plain.get_json()["target"]

