"""The worker calls over the API: claim (long-poll), heartbeat, complete,
cancel, the queues list; bad input named, stale leases refused, namespaces kept."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest

from cronman.config import Settings
from cronman.ids import run_id_for
from cronman.models import Run, RunUpdate
from cronman.processes.api import make_app
from cronman.store.work_records import WorkOrder
from cronman.timeutil import utcnow
from tests.support.api import job_spec

WORKER = {"kind": "worker", "queue": "spark", "payload": {"table": "t1"},
          "heartbeat_timeout": 60, "timeout": 14400}


@pytest.fixture
def app(store, database_url):
    return make_app(Settings(database_url=database_url, claim_wait_max=2, api_long_polls=1),
                    store=store)


@pytest.fixture
def client(app):
    return app.test_client()


def create(client, namespace="default", **overrides):
    overrides.setdefault("target", WORKER)
    resp = client.post("/v1/jobs", json=job_spec(namespace=namespace, **overrides))
    assert resp.status_code == 201, resp.get_json()
    return resp.get_json()


def fire(store, job, offset=0.0):
    """What a node does: claim the run row, then hand it to the queue."""
    t = utcnow().replace(microsecond=0) - timedelta(seconds=10) + timedelta(seconds=offset)
    run = Run(id=run_id_for(job["id"], t), job_id=job["id"], scheduled_for=t, status="running",
              attempt=1, node_id="n1", claimed_at=t, lease_expires_at=t + timedelta(seconds=30))
    assert store.runs.claim_runs([run]) == {run.id}
    target = job["target"]
    assert store.work.enqueue(WorkOrder(
        run_id=run.id, scheduled_for=t, job_id=job["id"], namespace=job["namespace"],
        queue=target["queue"], priority=job["priority"], due_at=t, attempt=1,
        payload=target["payload"], heartbeat_timeout=target["heartbeat_timeout"],
        timeout=target["timeout"], delivery=job["delivery"], retry=job["retry"], node_id="n1"))
    return run.id


def claim(client, queue="spark", **body):
    return client.post(f"/v1/queues/{queue}/claim", json={"worker_id": "w1", "wait": 0, **body})


def error_of(resp, status):
    assert resp.status_code == status, (resp.status_code, resp.get_data(as_text=True))
    return resp.get_json()["error"]


def test_a_worker_target_is_a_job_target(client):
    job = create(client)
    assert job["target"] == {**WORKER, "capacity": None}
    error = error_of(client.post("/v1/jobs", json=job_spec(
        name="bad", target={**WORKER, "heartbeat_timeout": 0})), 400)
    assert error["field"] == "target.heartbeat_timeout"
    error = error_of(client.post("/v1/jobs", json=job_spec(
        name="big", target={**WORKER, "payload": {"x": "y" * 70_000}})), 400)
    assert error["field"] == "target.payload"


def test_claim_heartbeat_complete(client, store):
    job = create(client)
    run_id = fire(store, job)
    resp = claim(client)
    assert resp.status_code == 200, resp.get_json()
    got = resp.get_json()
    assert got["payload"] == {"table": "t1"} and got["attempt"] == 1
    assert got["heartbeat_timeout"] == 60 and got["timeout"] == 14400
    assert got["run"]["id"] == run_id and got["run"]["status"] == "running"
    assert got["run"]["worker"]["state"] == "held"
    token = got["lease_token"]
    hb = client.post(f"/v1/runs/{run_id}/heartbeat",
                     json={"lease_token": token, "progress": "stage 2", "percent": 40})
    assert hb.status_code == 200 and hb.get_json()["cancel_requested"] is False
    shown = client.get(f"/v1/runs/{run_id}").get_json()["worker"]
    assert (shown["worker_id"], shown["progress"], shown["percent"]) == ("w1", "stage 2", 40)
    assert (shown["heartbeats"], shown["output"]) == (1, None)
    output = {"stdout": "copied 10 rows\n", "stderr": "warning: slow disk\n"}
    assert client.post(f"/v1/runs/{run_id}/heartbeat",
                       json={"lease_token": token, "output": output}).status_code == 200
    shown = client.get(f"/v1/runs/{run_id}").get_json()["worker"]
    assert (shown["heartbeats"], shown["output"], shown["progress"]) == (2, output, "stage 2")
    listed = client.get(f"/v1/jobs/{job['id']}/runs").get_json()["items"]
    assert listed[0]["worker"] == shown
    searched = client.get("/v1/runs?namespace=default").get_json()["items"]
    assert searched[0]["worker"] == shown
    queues = client.get("/v1/queues").get_json()["items"]
    assert [(q["queue"], q["depth"], q["held"]) for q in queues] == [("spark", 0, 1)]
    assert queues[0]["workers"][0]["id"] == "w1"
    assert client.get("/v1/cluster").get_json()["queues"] == queues
    done = client.post(f"/v1/runs/{run_id}/complete",
                       json={"lease_token": token, "status": "succeeded", "result": {"rows": 7}})
    assert done.status_code == 200, done.get_json()
    run = done.get_json()
    assert run["status"] == "succeeded" and run["result"] == {"rows": 7, "worker_id": "w1"}
    assert "worker" not in run
    # A second report with the same token: stale, nothing changes.
    error = error_of(client.post(f"/v1/runs/{run_id}/complete",
                                 json={"lease_token": token, "status": "failed"}), 409)
    assert error["code"] == "stale_lease"
    error = error_of(client.post(f"/v1/runs/{run_id}/heartbeat",
                                 json={"lease_token": token}), 409)
    assert error["code"] == "stale_lease"
    assert client.get(f"/v1/runs/{run_id}").get_json()["status"] == "succeeded"


def test_claim_answers_204_when_nothing_comes(client):
    started = time.monotonic()
    resp = claim(client, wait=0.5)
    assert resp.status_code == 204 and resp.get_data() == b""
    assert 0.4 < time.monotonic() - started < 5


def test_a_waiting_claim_takes_what_is_enqueued(client, store):
    job = create(client)
    answers = []

    def worker():
        answers.append(claim(client, wait=2))

    t = threading.Thread(target=worker)
    t.start()
    time.sleep(0.3)
    run_id = fire(store, job)
    t.join(5)
    assert answers[0].status_code == 200
    assert answers[0].get_json()["run"]["id"] == run_id


def test_a_claim_with_max_takes_several_runs(client, store):
    job = create(client)
    ids = [fire(store, job, offset=i) for i in range(3)]
    resp = claim(client, max=2, slots=4)
    assert resp.status_code == 200
    got = resp.get_json()["claims"]
    assert [c["run"]["id"] for c in got] == ids[:2]
    assert all(c["run"]["status"] == "running" and c["attempt"] == 1 for c in got)
    assert got[0]["lease_token"] != got[1]["lease_token"]
    for c in got:
        beat = client.post(f"/v1/runs/{c['run']['id']}/heartbeat",
                           json={"lease_token": c["lease_token"]})
        assert beat.status_code == 200 and beat.get_json()["cancel_requested"] is False
    rest = claim(client, max=5).get_json()["claims"]
    assert [c["run"]["id"] for c in rest] == ids[2:]
    assert claim(client, max=5).status_code == 204
    # A waiting claim with max answers as soon as one run is there.
    answers = []
    t = threading.Thread(target=lambda: answers.append(claim(client, max=5, wait=2)))
    t.start()
    time.sleep(0.3)
    late = fire(store, job, offset=5)
    t.join(5)
    assert [c["run"]["id"] for c in answers[0].get_json()["claims"]] == [late]


def test_long_polls_beyond_the_cap_answer_at_once(client):
    first = threading.Thread(target=lambda: claim(client, wait=1.5))
    first.start()
    time.sleep(0.2)
    started = time.monotonic()
    assert claim(client, wait=1.5).status_code == 204  # the one long-poll is taken
    assert time.monotonic() - started < 1.0
    first.join(5)


def test_a_failed_report_is_retried(client, store):
    job = create(client, retry={"max_attempts": 2, "min_backoff": 1, "max_backoff": 1})
    run_id = fire(store, job)
    token = claim(client).get_json()["lease_token"]
    run = client.post(f"/v1/runs/{run_id}/complete", json={
        "lease_token": token, "status": "failed", "error": "exit 3"}).get_json()
    assert (run["status"], run["error"]) == ("retrying", "exit 3")
    assert run["worker"]["state"] == "queued"
    time.sleep(1.1)
    again = claim(client, worker_id="w2").get_json()
    assert again["attempt"] == 2 and again["run"]["id"] == run_id
    assert again["run"]["worker"]["heartbeats"] == 0
    shown = client.get(f"/v1/runs/{run_id}").get_json()
    (first,) = shown["earlier_attempts"]
    assert (first["attempt"], first["status"], first["error"], first["result"]) == (
        1, "retrying", "exit 3", {"worker_id": "w1"})
    assert first["started_at"] == run["started_at"] and "trace_id" not in shown


def test_cancel(client, store):
    job = create(client)
    queued = fire(store, job)
    resp = client.post(f"/v1/runs/{queued}/cancel", json={"reason": "not needed"})
    assert resp.status_code == 202
    assert (resp.get_json()["status"], resp.get_json()["error"]) == (
        "failed", "cancelled: not needed")
    error_of(client.post(f"/v1/runs/{queued}/cancel"), 409)  # ended already
    held = fire(store, job, offset=1)
    token = claim(client).get_json()["lease_token"]
    resp = client.post(f"/v1/runs/{held}/cancel")
    assert resp.status_code == 202 and resp.get_json()["worker"]["cancel_requested"] is True
    hb = client.post(f"/v1/runs/{held}/heartbeat", json={"lease_token": token}).get_json()
    assert hb["cancel_requested"] is True


def test_cancel_of_another_kind_of_run_is_a_conflict(client):
    job = client.post("/v1/jobs", json=job_spec(name="http-job")).get_json()
    run = client.post(f"/v1/jobs/{job['id']}/trigger").get_json()
    error = error_of(client.post(f"/v1/runs/{run['id']}/cancel"), 409)
    assert error["message"].startswith("an http run cannot be cancelled: its request is "
                                       "sent and ends within the target's timeout")


def test_a_container_runs_cancel_is_recorded_on_the_run_for_its_node(client, store):
    job = client.post("/v1/jobs", json=job_spec(name="long", target={
        "kind": "container", "image": "busybox", "command": ["sleep", "3600"]})).get_json()
    run = client.post(f"/v1/jobs/{job['id']}/trigger").get_json()
    resp = client.post(f"/v1/runs/{run['id']}/cancel", json={"reason": "too long"})
    assert resp.status_code == 202, resp.get_json()
    asked = resp.get_json()["cancel_request"]
    assert (asked["by"], asked["reason"]) == ("an operator (no token: auth is off)", "too long")
    assert resp.get_json()["status"] == "claimed"  # its node stops it (tests/agent)
    assert client.get(f"/v1/runs/{run['id']}").get_json()["cancel_request"] == asked
    scheduled = store.runs.get_run(run["id"]).scheduled_for
    assert store.runs.cancel_requests([(run["id"], scheduled)]) == {run["id"]: asked}
    # Ended since: the cancel is refused, and the row keeps what it was.
    store.runs.write_run_updates([RunUpdate(id=run["id"], scheduled_for=scheduled,
                                            status="succeeded", finished_at=utcnow())])
    error = error_of(client.post(f"/v1/runs/{run['id']}/cancel"), 409)
    assert error["message"] == "the run already ended (succeeded)"
    assert store.runs.cancel_requests([(run["id"], scheduled)]) == {}
    assert "cancel_request" not in client.get(f"/v1/runs/{run['id']}").get_json()
    # A replay starts afresh: no cancel carried over.
    assert client.post(f"/v1/runs/{run['id']}/replay").status_code == 202
    assert store.runs.cancel_request(run["id"]) is None


@pytest.mark.parametrize(("path", "body", "field"), [
    ("/v1/queues/spark/claim", {}, "worker_id"),
    ("/v1/queues/spark/claim", {"worker_id": ""}, "worker_id"),
    ("/v1/queues/spark/claim", {"worker_id": "x" * 129}, "worker_id"),
    ("/v1/queues/spark/claim", {"worker_id": "a\nb"}, "worker_id"),
    ("/v1/queues/spark/claim", {"worker_id": 5}, "worker_id"),
    ("/v1/queues/spark/claim", {"worker_id": "w", "namespace": "bad ns"}, "namespace"),
    ("/v1/queues/spark/claim", {"worker_id": "w", "wait": 31}, "wait"),
    ("/v1/queues/spark/claim", {"worker_id": "w", "wait": -1}, "wait"),
    ("/v1/queues/spark/claim", {"worker_id": "w", "wait": "1"}, "wait"),
    ("/v1/queues/spark/claim", {"worker_id": "w", "slots": 0}, "slots"),
    ("/v1/queues/spark/claim", {"worker_id": "w", "slots": 1001}, "slots"),
    ("/v1/queues/spark/claim", {"worker_id": "w", "slots": 1.5}, "slots"),
    ("/v1/queues/spark/claim", {"worker_id": "w", "max": 0}, "max"),
    ("/v1/queues/spark/claim", {"worker_id": "w", "max": 101}, "max"),
    ("/v1/queues/spark/claim", {"worker_id": "w", "max": "2"}, "max"),
    ("/v1/queues/spark/claim", {"worker_id": "w", "other": 1}, "other"),
    ("/v1/queues/sp%20ark/claim", {"worker_id": "w"}, "queue"),
    ("/v1/queues/" + "q" * 65 + "/claim", {"worker_id": "w"}, "queue"),
    ("/v1/runs/{run}/heartbeat", {}, "lease_token"),
    ("/v1/runs/{run}/heartbeat", {"lease_token": "t", "progress": "x" * 1025}, "progress"),
    ("/v1/runs/{run}/heartbeat", {"lease_token": "t", "percent": 101}, "percent"),
    ("/v1/runs/{run}/heartbeat", {"lease_token": "t", "percent": -1}, "percent"),
    ("/v1/runs/{run}/heartbeat", {"lease_token": "t", "extra": 1}, "extra"),
    ("/v1/runs/{run}/heartbeat", {"lease_token": "a b"}, "lease_token"),
    ("/v1/runs/{run}/heartbeat", {"lease_token": "t", "output": "x"}, "output"),
    ("/v1/runs/{run}/heartbeat", {"lease_token": "t", "output": {"stdout": "x" * 4097}},
     "output.stdout"),
    ("/v1/runs/{run}/heartbeat", {"lease_token": "t", "output": {"stderr": 3}},
     "output.stderr"),
    ("/v1/runs/{run}/heartbeat", {"lease_token": "t", "output": {"log": ""}}, "output.log"),
    ("/v1/runs/{run}/complete", {"lease_token": "t"}, "status"),
    ("/v1/runs/{run}/complete", {"lease_token": "t", "status": "lost"}, "status"),
    ("/v1/runs/{run}/complete", {"lease_token": "t", "status": "failed", "error": "e" * 4097},
     "error"),
    ("/v1/runs/{run}/complete", {"lease_token": "t", "status": "failed", "result": [1]},
     "result"),
    ("/v1/runs/{run}/complete", {"lease_token": "t", "status": "succeeded",
                                 "result": {"x": "y" * 70_000}}, "result"),
    ("/v1/runs/{run}/complete", {"lease_token": "t", "status": "failed", "error": "a\u0000"},
     "error"),
    ("/v1/runs/{run}/cancel", {"reason": "r" * 1025}, "reason"),
    ("/v1/runs/{run}/cancel", {"reason": 3}, "reason"),
])
def test_bad_input_is_a_400_naming_the_field(client, store, path, body, field):
    run_id = fire(store, create(client))
    error = error_of(client.post(path.format(run=run_id), json=body), 400)
    assert error["field"] == field, error


def test_queues_list_bad_input(client):
    assert error_of(client.get("/v1/queues?limit=0"), 400)["field"] == "limit"
    assert error_of(client.get("/v1/queues?cursor=nope"), 400)["field"] == "cursor"
    assert error_of(client.get("/v1/queues?namespace=a%20b"), 400)["field"] == "namespace"
    assert error_of(client.get("/v1/queues?other=1"), 400)["field"] == "other"


def test_queues_are_paged(client, store):
    for i, queue in enumerate(("a", "b", "c")):
        job = create(client, name=f"job-{queue}", target={**WORKER, "queue": queue})
        fire(store, job, offset=i)
    first = client.get("/v1/queues?limit=2").get_json()
    assert [q["queue"] for q in first["items"]] == ["a", "b"]
    rest = client.get(f"/v1/queues?limit=2&cursor={first['next_cursor']}").get_json()
    assert [q["queue"] for q in rest["items"]] == ["c"] and rest["next_cursor"] is None


def test_tokens_hold_to_their_namespaces(store, database_url):
    app = make_app(Settings(database_url=database_url, auth="required", claim_wait_max=0),
                   store=store)
    client = app.test_client()
    admin, _ = store.tokens.create_token("admin", None)
    mine, _ = store.tokens.create_token("team-a", ["team-a"])
    as_admin = {"Authorization": f"Bearer {admin}"}
    as_a = {"Authorization": f"Bearer {mine}"}
    job = client.post("/v1/jobs", json=job_spec(namespace="team-b", target=WORKER),
                      headers=as_admin).get_json()
    run_id = fire(store, job)
    body = {"worker_id": "w", "namespace": "team-b"}
    error = error_of(client.post("/v1/queues/spark/claim", json=body, headers=as_a), 403)
    assert error["field"] == "namespace"
    assert client.post("/v1/queues/spark/claim", json=body).status_code == 401
    for call in ("heartbeat", "complete", "cancel"):
        resp = client.post(f"/v1/runs/{run_id}/{call}",
                           json={"lease_token": "t", "status": "failed"}, headers=as_a)
        assert resp.status_code == 403, (call, resp.get_json())
    listed = client.get("/v1/queues", headers=as_a).get_json()["items"]
    assert listed == []
    assert client.get("/v1/queues?namespace=team-b", headers=as_a).status_code == 403
    got = client.post("/v1/queues/spark/claim", json=body, headers=as_admin)
    assert got.status_code == 200
    # The run's own lease token under another namespace's token: 403, nothing renewed.
    token = got.get_json()["lease_token"]
    before = store.work.items([run_id], now=utcnow())[run_id]
    resp = client.post(f"/v1/runs/{run_id}/heartbeat", json={"lease_token": token,
                                                              "progress": "x"}, headers=as_a)
    assert resp.status_code == 403
    assert store.work.items([run_id], now=utcnow())[run_id] == before
    resp = client.post(f"/v1/runs/{run_id}/heartbeat", json={"lease_token": token},
                       headers=as_admin)
    assert resp.status_code == 200


def test_metrics_count_claims_and_show_depth(client, store):
    job = create(client)
    fire(store, job)
    fire(store, job, offset=1)
    assert claim(client).status_code == 200
    text = client.get("/metrics").get_data(as_text=True)
    assert 'cronman_work_queue_depth{namespace="default",queue="spark"} 1.0' in text
    assert 'cronman_work_claims_total{namespace="default",queue="spark"} 1.0' in text
    assert "cronman_work_claim_wait_seconds_count 1.0" in text
