"""The client's ``Worker`` against a real HTTP server speaking the worker calls' wire
contract (tests/support/work_queue_server.py, loopback): results, failures, progress,
lost leases, cancels, transient errors, concurrency, stopping."""

from __future__ import annotations

import threading
import time

import pytest

from cronman.client import CronmanClient, RunFailed, Unauthenticated, Worker
from cronman.client.run_context import (
    CANCEL_REQUESTED,
    LEASE_LOST,
    TIMED_OUT,
    WORKER_STOPPED,
)
from tests.support.work_queue_server import work_queue_server

HB = 0.3  # heartbeat_timeout of the tests' runs: a heartbeat every 0.1 s


@pytest.fixture
def server():
    with work_queue_server() as srv:
        yield srv


@pytest.fixture
def client(server):
    c = CronmanClient(server.url)
    yield c
    c.close()


def test_a_handlers_result_is_reported_succeeded_with_its_progress(server, client):
    item = server.enqueue({"rows": 3}, heartbeat_timeout=HB)
    seen = {}

    def handler(payload, ctx):
        seen.update(payload=payload, attempt=ctx.attempt, run=ctx.run["id"])
        ctx.progress("half", percent=50)
        time.sleep(0.35)
        return {"copied": payload["rows"]}

    report = Worker(client, "q", handler, worker_id="w1", wait=1).run_once()
    assert report is not None and report.accepted and report.status == "succeeded"
    assert seen == {"payload": {"rows": 3}, "attempt": 1, "run": item.run_id}
    assert item.status == "succeeded" and item.result == {"copied": 3}
    assert {"progress": "half", "percent": 50.0}.items() <= item.heartbeats[0].items()
    assert len(item.heartbeats) >= 2 and all("progress" not in h for h in item.heartbeats[1:])
    assert server.claims[0] == {"worker_id": "w1", "namespace": "default", "wait": 1,
                                "slots": 1}


def test_nothing_queued_is_none(server, client):
    assert Worker(client, "q", lambda p, c: {}, wait=0.2).run_once() is None


def test_a_raising_handler_fails_the_run_with_its_message(server, client):
    item = server.enqueue(heartbeat_timeout=HB)

    def handler(payload, ctx):
        raise ValueError("bad table")

    report = Worker(client, "q", handler, wait=1).run_once()
    assert report.status == "failed" and report.accepted
    assert item.status == "failed" and item.error == "bad table"
    item2 = server.enqueue(heartbeat_timeout=HB)

    def failing(payload, ctx):
        raise RunFailed("exit code 2", {"exit_code": 2})

    Worker(client, "q", failing, wait=1).run_once()
    assert item2.error == "exit code 2" and item2.result == {"exit_code": 2}


def test_a_result_the_api_would_refuse_fails_the_run_saying_why(server, client):
    item = server.enqueue(heartbeat_timeout=HB)
    Worker(client, "q", lambda p, c: {"blob": "x" * 70_000}, wait=1).run_once()
    assert item.status == "failed" and item.result is None
    assert "more than 65536" in item.error
    item = server.enqueue(heartbeat_timeout=HB)
    Worker(client, "q", lambda p, c: [1, 2], wait=1).run_once()
    assert item.status == "failed" and "returned list, not a dict" in item.error


def test_a_lost_lease_cancels_the_handler_and_nothing_is_reported(server, client):
    item = server.enqueue(heartbeat_timeout=HB)
    reasons = []

    def handler(payload, ctx):
        # The lease is taken back under the worker (as after a pause past its timeout).
        with server._cond:
            item.lease_expires = 0
        assert ctx.cancelled.wait(5)
        reasons.append(ctx.cancel_reason)
        return {"late": True}

    report = Worker(client, "q", handler, wait=1).run_once()
    assert reasons == [LEASE_LOST]
    assert report.status is None and not report.accepted
    assert item.completions == [] and item.status == "queued" and item.attempt == 2
    assert [path for path, _ in server.refused] == ["heartbeat"]  # no completion was tried


def test_a_cancel_reaches_the_handler_on_the_next_heartbeat(server, client):
    item = server.enqueue(heartbeat_timeout=HB)

    def handler(payload, ctx):
        server.cancel(item.run_id)
        started = time.monotonic()
        assert ctx.cancelled.wait(5)
        assert time.monotonic() - started < HB
        raise RuntimeError("stopped early")

    Worker(client, "q", handler, wait=1).run_once()
    assert item.status == "failed" and item.error == f"{CANCEL_REQUESTED}: stopped early"


def test_the_runs_timeout_cancels_it(server, client):
    item = server.enqueue(heartbeat_timeout=HB, timeout=0.4)
    reasons = []

    def handler(payload, ctx):
        assert ctx.cancelled.wait(5)
        reasons.append((ctx.cancel_reason, ctx.remaining() <= 0))
        raise RunFailed("killed by signal 15")

    Worker(client, "q", handler, wait=1).run_once()
    assert reasons == [(TIMED_OUT, True)]
    assert item.error == f"{TIMED_OUT}: killed by signal 15"


def test_heartbeats_failing_for_a_while_keep_the_lease(server, client):
    item = server.enqueue(heartbeat_timeout=1.5)
    server.fail_next("heartbeat", 2, 503)
    server.fail_next("complete", 2, 502)

    def handler(payload, ctx):
        server.wait_for(lambda: len(item.heartbeats) >= 2)
        return {"ok": True}

    report = Worker(client, "q", handler, wait=1).run_once()
    assert report.accepted and item.status == "succeeded" and item.attempt == 1
    assert item.completions[0]["status"] == "succeeded"


def test_a_completion_is_given_up_when_the_lease_would_have_expired(server, client):
    item = server.enqueue(heartbeat_timeout=1.0)
    server.fail_next("complete", 1000, 503)
    started = time.monotonic()
    report = Worker(client, "q", lambda p, c: {"ok": 1}, wait=1).run_once()
    took = time.monotonic() - started
    assert not report.accepted and "before the lease expired" in report.note
    assert took < 2.5 and item.completions == []


def test_runs_are_worked_n_at_once_and_stop_waits_for_them(server, client):
    items = [server.enqueue({"n": n}, heartbeat_timeout=HB) for n in range(3)]
    barrier = threading.Barrier(3, timeout=5)

    def handler(payload, ctx):
        barrier.wait()  # all three are held at once
        return {"n": payload["n"]}

    worker = Worker(client, "q", handler, concurrency=3, wait=0.2)
    thread = threading.Thread(target=worker.run)
    thread.start()
    server.wait_for(lambda: all(i.status == "succeeded" for i in items))
    worker.stop()
    thread.join(5)
    assert not thread.is_alive()
    assert sorted(i.result["n"] for i in items) == [0, 1, 2]
    assert all(c["slots"] == 3 for c in server.claims)


def test_stopping_lets_held_runs_finish_within_the_grace_then_reports_them_stopped(
        server, client):
    quick, slow = (server.enqueue({"s": s}, heartbeat_timeout=HB) for s in (0.3, 30))
    cancelled, started = [], []

    def handler(payload, ctx):
        started.append(ctx.run_id)
        if ctx.cancelled.wait(payload["s"]):
            cancelled.append(ctx.cancel_reason)
            raise RuntimeError("interrupted")
        return {"slept": payload["s"]}

    worker = Worker(client, "q", handler, concurrency=2, wait=0.2, grace=1.0)
    thread = threading.Thread(target=worker.run)
    thread.start()
    server.wait_for(lambda: len(started) == 2)
    asked = len(server.claims)
    worker.stop()
    thread.join(5)
    assert not thread.is_alive()
    assert quick.status == "succeeded" and quick.result == {"slept": 0.3}
    assert slow.status == "failed" and slow.error == WORKER_STOPPED
    assert cancelled == [WORKER_STOPPED]
    assert len(server.claims) == asked  # none after the stop
    assert server.claims[0]["max"] == 2  # both free slots asked for in one call


def test_a_handler_that_ignores_its_cancel_is_reported_without_it(server, client):
    item = server.enqueue(heartbeat_timeout=HB)
    release, started = threading.Event(), threading.Event()

    def handler(payload, ctx):
        started.set()
        release.wait(10)
        return {}

    worker = Worker(client, "q", handler, wait=0.2, grace=0.2, cancel_wait=0.3)
    thread = threading.Thread(target=worker.run)
    thread.start()
    assert started.wait(5)
    worker.stop()
    thread.join(5)
    release.set()
    assert item.status == "failed" and item.error == WORKER_STOPPED
    assert len(item.completions) == 1


def test_a_claim_refused_for_good_stops_the_worker():
    with work_queue_server(token="right") as srv:
        with CronmanClient(srv.url, "wrong") as client:
            worker = Worker(client, "q", lambda p, c: {}, wait=0.2)
            with pytest.raises(Unauthenticated):
                worker.run()


def test_claims_retry_an_unavailable_api(server, client):
    server.fail_next("claim", 2, 503)
    item = server.enqueue(heartbeat_timeout=HB)
    worker = Worker(client, "q", lambda p, c: {"ok": 1}, wait=0.2)
    thread = threading.Thread(target=worker.run)
    thread.start()
    server.wait_for(lambda: item.status == "succeeded")
    worker.stop()
    thread.join(5)
    assert len(server.claims) >= 1


def test_a_run_a_long_poll_brings_after_the_stop_is_reported_stopped_at_once(server, client):
    calls = []
    worker = Worker(client, "q", lambda p, c: calls.append(1) or {}, wait=2)
    thread = threading.Thread(target=worker.run)
    thread.start()
    server.wait_for(lambda: len(server.claims) == 1)
    worker.stop()
    item = server.enqueue(heartbeat_timeout=HB)  # the claim in flight takes it
    thread.join(5)
    assert not thread.is_alive() and calls == []
    assert item.status == "failed" and item.error == WORKER_STOPPED and item.attempt == 1


def test_a_claims_timeout_outlasts_its_long_poll(server):
    with CronmanClient(server.url, timeout=0.3) as short:  # calls wait 0.3 s for an answer
        started = time.monotonic()
        assert short.claim("q", "w1", wait=1.0) is None  # the long-poll's 204, not a timeout
        assert time.monotonic() - started >= 1.0


def test_claims_answered_at_once_are_not_asked_in_a_busy_loop(server, client):
    server.max_wait = 0  # as an API with no long-poll to spare
    worker = Worker(client, "q", lambda p, c: {}, wait=5)
    thread = threading.Thread(target=worker.run)
    thread.start()
    time.sleep(2.0)
    worker.stop()
    thread.join(5)
    assert 2 <= len(server.claims) <= 5


def test_a_completion_whose_answer_was_lost_is_found_recorded(server, client):
    item = server.enqueue(heartbeat_timeout=1.5)
    server.drop_answers("complete", 1)  # recorded, but the worker hears nothing
    report = Worker(client, "q", lambda p, c: {"ok": 1}, worker_id="w9", wait=1).run_once()
    assert report.accepted and report.note == "recorded by a try that got no answer"
    assert item.status == "succeeded" and item.result == {"ok": 1}
    assert len(item.completions) == 1 and [p for p, _ in server.refused] == ["complete"]


def test_a_claim_whose_answer_was_lost_costs_its_run_one_lease(server, client):
    item = server.enqueue(heartbeat_timeout=0.5)
    server.drop_answers("claim", 1)  # held for this worker, which never hears of it
    attempts = []
    worker = Worker(client, "q", lambda p, c: attempts.append(c.attempt) or {}, wait=0.3)
    thread = threading.Thread(target=worker.run)
    thread.start()
    server.wait_for(lambda: item.status == "succeeded", 10)
    worker.stop()
    thread.join(5)
    assert attempts == [2] and item.attempt == 2


def test_progress_is_kept_within_the_apis_bounds(server, client):
    item = server.enqueue(heartbeat_timeout=HB)

    def handler(payload, ctx):
        ctx.progress("x" * 5000, percent=250)
        server.wait_for(lambda: len(item.heartbeats) >= 1)
        ctx.progress(None, percent=float("nan"))
        server.wait_for(lambda: len(item.heartbeats) >= 2)
        return {}

    Worker(client, "q", handler, wait=1).run_once()
    first, second = item.heartbeats[:2]
    assert len(first["progress"]) == 1024 and first["percent"] == 100.0
    assert "percent" not in second and "progress" not in second
