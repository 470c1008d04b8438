"""Overlap buffers, the circuit breaker, run limits and idempotency keys through
the API (Flask test client), on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import pytest

from cronman.config import Settings
from cronman.models import RunUpdate
from cronman.processes.api import make_app
from cronman.timeutil import format_rfc3339, utcnow
from cronman.vocabulary import BUFFERED_PREFIX
from tests.support.api import job_spec
from tests.support.store_data import base_time, make_run


@pytest.fixture
def client(store, database_url):
    app = make_app(Settings(database_url=database_url), store=store)
    return app.test_client()


def create(client, **overrides):
    resp = client.post("/v1/jobs", json=job_spec(**overrides))
    assert resp.status_code == 201, resp.get_json()
    return resp.get_json()


def error_of(resp, status, field):
    assert resp.status_code == status, (resp.status_code, resp.get_data(as_text=True))
    err = resp.get_json()["error"]
    assert err["field"] == field, err
    return err


def end_runs(store, job_id, statuses, start=0):
    """Claim runs of the job and end them with ``statuses`` (the scheduler's writes)."""
    t0 = base_time()
    runs = [make_run(job_id, t0 + timedelta(seconds=start + i), attempt=1)
            for i in range(len(statuses))]
    store.runs.claim_runs(runs)
    for run, status in zip(runs, statuses, strict=True):
        store.runs.write_run_updates([RunUpdate(
            id=run.id, scheduled_for=run.scheduled_for, status=status, attempt=1,
            finished_at=utcnow(), error=f"HTTP 500 ({status})" if status != "succeeded" else None,
            counted_job=job_id)], node_id="n1")
    return runs


# -- definitions ---------------------------------------------------------------


@pytest.mark.parametrize(("key", "value"), [
    ("pause_after_failures", 0), ("pause_after_failures", 1001), ("pause_after_failures", "3"),
    ("max_runs", 0), ("max_runs", 10**9 + 1), ("max_runs", 1.5),
    ("buffer_limit", 0), ("buffer_limit", 1001), ("concurrency", "buffer_some"),
])
def test_bad_policy_values_are_400_naming_the_field(client, key, value):
    error_of(client.post("/v1/jobs", json=job_spec(**{key: value})), 400, key)


@pytest.mark.parametrize("key", ["state", "runs_left", "pause_reason", "failure_streak"])
def test_policy_state_is_read_only(client, key):
    err = error_of(client.post("/v1/jobs", json=job_spec(**{key: 1})), 400, key)
    assert "read-only" in err["message"]


def test_a_job_shows_its_policies_and_their_state(client):
    job = create(client, concurrency="buffer_all", buffer_limit=5, pause_after_failures=3,
                 max_runs=10)
    assert (job["concurrency"], job["buffer_limit"], job["pause_after_failures"],
            job["max_runs"]) == ("buffer_all", 5, 3, 10)
    assert (job["state"], job["runs_left"], job["runs_done"], job["failure_streak"],
            job["pause_reason"], job["pause_note"], job["done_at"]) == (
        "active", 10, 0, 0, None, None, None)
    got = client.get(f"/v1/jobs/{job['id']}").get_json()
    assert got["buffered"] == 0
    plain = create(client, name="plain")
    assert plain["runs_left"] is None and plain["max_runs"] is None
    # A job read back is a valid replacement: the state keys are ignored.
    resp = client.put(f"/v1/jobs/{job['id']}", json={**got, "priority": 2})
    assert resp.status_code == 200, resp.get_json()
    assert resp.get_json()["priority"] == 2


# -- pause and resume with a note -------------------------------------------------


def test_pause_and_resume_take_a_note(client):
    job = create(client)
    resp = client.post(f"/v1/jobs/{job['id']}/pause", json={"note": "billing migration"})
    assert resp.status_code == 200
    paused = resp.get_json()
    assert paused["paused"] and paused["state"] == "paused"
    assert paused["pause_note"] == "billing migration" and paused["paused_at"]
    # Paused again, it keeps the time it was first paused at.
    again = client.post(f"/v1/jobs/{job['id']}/pause", json={"note": "still"}).get_json()
    assert again["paused_at"] == paused["paused_at"] and again["pause_note"] == "still"
    error_of(client.post(f"/v1/jobs/{job['id']}/resume", json={"note": "x" * 1025}), 400,
             "note")
    error_of(client.post(f"/v1/jobs/{job['id']}/resume", json={"nope": 1}), 400, "nope")
    resumed = client.post(f"/v1/jobs/{job['id']}/resume", json={"note": "done"}).get_json()
    assert not resumed["paused"] and resumed["pause_note"] == "done"
    # No body at all, as before.
    assert client.post(f"/v1/jobs/{job['id']}/pause").get_json()["pause_note"] is None
    items = client.get(f"/v1/jobs/{job['id']}/history").get_json()["items"]
    assert [e["action"] for e in items][:4] == ["pause", "resume", "pause", "pause"]
    assert items[1]["details"] == {"note": "done"}


def test_the_breaker_pauses_and_resume_clears_it(client, store):
    job = create(client, pause_after_failures=2)
    end_runs(store, job["id"], ["failed", "lost"])
    got = client.get(f"/v1/jobs/{job['id']}").get_json()
    assert got["paused"] and got["state"] == "paused" and got["failure_streak"] == 2
    assert got["pause_reason"] == ("paused after 2 consecutive failed runs; last error: "
                                   "HTTP 500 (lost)")
    assert got["next_fire_at"] is None and got["paused_at"]
    entry = client.get(f"/v1/jobs/{job['id']}/history").get_json()["items"][0]
    assert entry["action"] == "pause" and entry["actor"]["name"] == "scheduler"
    resumed = client.post(f"/v1/jobs/{job['id']}/resume").get_json()
    assert (resumed["paused"], resumed["pause_reason"], resumed["failure_streak"],
            resumed["paused_at"]) == (False, None, 0, None)
    # The count starts again: one more failure does not pause it.
    end_runs(store, job["id"], ["failed"], start=10)
    assert client.get(f"/v1/jobs/{job['id']}").get_json()["paused"] is False


def test_max_runs_makes_a_job_done_until_it_is_raised(client, store):
    job = create(client, max_runs=2)
    end_runs(store, job["id"], ["succeeded", "skipped", "failed"])
    got = client.get(f"/v1/jobs/{job['id']}").get_json()
    assert (got["state"], got["runs_left"], got["runs_done"]) == ("done", 0, 2)
    assert got["done_at"] and got["next_fire_at"] is None
    err = error_of(client.post(f"/v1/jobs/{job['id']}/resume"), 409, "max_runs")
    assert "done" in err["message"]
    # Still done: a PATCH that keeps it at its limit keeps it paused.
    kept = client.patch(f"/v1/jobs/{job['id']}", json={"priority": 1, "paused": False})
    assert kept.get_json()["state"] == "done" and kept.get_json()["paused"]
    raised = client.patch(f"/v1/jobs/{job['id']}", json={"max_runs": 5}).get_json()
    assert (raised["state"], raised["runs_left"], raised["done_at"]) == ("paused", 3, None)
    active = client.post(f"/v1/jobs/{job['id']}/resume").get_json()
    assert active["state"] == "active" and active["next_fire_at"]


def test_buffered_fires_show_on_the_job_and_in_its_runs(client, store):
    job = create(client, concurrency="buffer_one")
    t0 = base_time()
    run = make_run(job["id"], t0, attempt=1)
    store.runs.claim_runs([run])
    store.runs.write_run_updates([RunUpdate(
        id=run.id, scheduled_for=t0, status="claimed",
        error=f"{BUFFERED_PREFIX}waiting for run r0 to end (buffer_one)",
        gate={"buffered": {"policy": "buffer_one", "behind": ["r0"]}})], node_id="n1")
    assert client.get(f"/v1/jobs/{job['id']}").get_json()["buffered"] == 1
    (listed,) = client.get(f"/v1/jobs/{job['id']}/runs").get_json()["items"]
    assert listed["status"] == "claimed" and listed["error"].startswith(BUFFERED_PREFIX)
    assert listed["gate"]["buffered"]["behind"] == ["r0"]


# -- idempotency keys ------------------------------------------------------------


def keyed(client, path, key, body=None):
    return client.post(path, json=body, headers={"Idempotency-Key": key})


def test_a_repeated_create_answers_the_first_answer(client, store):
    first = keyed(client, "/v1/jobs", "create-1", job_spec())
    assert first.status_code == 201
    again = keyed(client, "/v1/jobs", "create-1", job_spec())
    assert again.status_code == 201 and again.get_json() == first.get_json()
    assert again.headers["Location"] == first.headers["Location"]
    assert again.headers["Idempotent-Replayed"] == "true"
    assert len(client.get("/v1/jobs").get_json()["items"]) == 1
    err = error_of(keyed(client, "/v1/jobs", "create-1", job_spec(priority=3)), 422,
                   "Idempotency-Key")
    assert client.post("/v1/jobs", json=job_spec(priority=3)).status_code == 409  # name taken
    assert err["code"] == "idempotency_key_reused"
    # The same key on another call is another request too.
    assert keyed(client, f"/v1/jobs/{first.get_json()['id']}/trigger",
                 "create-1").status_code == 422


@pytest.mark.parametrize("key", ["", "   ", "k" * 256, "naïve"])
def test_a_bad_key_is_400_naming_the_header(client, key):
    resp = client.post("/v1/jobs", json=job_spec(),
                       headers={"Idempotency-Key": key.encode("utf-8").decode("latin-1")})
    error_of(resp, 400, "Idempotency-Key")


def test_trigger_bulk_backfill_and_replay_with_keys(client, store):
    job = create(client, schedule={"kind": "interval", "every": 60})
    t1 = keyed(client, f"/v1/jobs/{job['id']}/trigger", "t-1")
    t2 = keyed(client, f"/v1/jobs/{job['id']}/trigger", "t-1")
    assert t1.status_code == t2.status_code == 202
    assert t1.get_json()["id"] == t2.get_json()["id"]
    runs = client.get(f"/v1/jobs/{job['id']}/runs").get_json()["items"]
    assert [r["origin"] for r in runs] == ["trigger"]

    bulk = {"jobs": [job_spec(name="b1"), job_spec(name="b2")]}
    b1, b2 = keyed(client, "/v1/jobs/bulk", "bulk-1", bulk), keyed(client, "/v1/jobs/bulk",
                                                                   "bulk-1", bulk)
    assert b1.status_code == b2.status_code == 201 and b1.get_json() == b2.get_json()

    now = utcnow()
    span = {"since": format_rfc3339(now - timedelta(minutes=5)), "until": format_rfc3339(now)}
    f1 = keyed(client, f"/v1/jobs/{job['id']}/backfill", "fill-1", span)
    f2 = keyed(client, f"/v1/jobs/{job['id']}/backfill", "fill-1", span)
    assert f1.status_code == f2.status_code == 202 and f1.get_json() == f2.get_json()
    assert f1.get_json()["requested"] >= 4
    assert keyed(client, f"/v1/jobs/{job['id']}/backfill", "fill-2", span).get_json()[
        "requested"] == 0  # a new key runs the call again: nothing left to fill

    run_id = t1.get_json()["id"]
    store.runs.write_run_updates([RunUpdate(
        id=run_id, scheduled_for=store.runs.get_run(run_id).scheduled_for, status="failed",
        attempt=1, finished_at=utcnow(), error="x")])
    r1 = keyed(client, f"/v1/runs/{run_id}/replay", "replay-1")
    r2 = keyed(client, f"/v1/runs/{run_id}/replay", "replay-1")
    assert r1.status_code == r2.status_code == 202 and r1.get_json() == r2.get_json()
    # Without the key, the run (back in flight) cannot be replayed again.
    assert client.post(f"/v1/runs/{run_id}/replay").status_code == 409


def test_a_refused_call_keeps_no_answer(client):
    assert keyed(client, "/v1/jobs", "bad-1", job_spec(priority="high")).status_code == 400
    # The refusal was not kept: the same call is checked again...
    assert keyed(client, "/v1/jobs", "bad-1", job_spec(priority="high")).status_code == 400
    # ...and the key, never answered, serves the corrected call.
    assert keyed(client, "/v1/jobs", "bad-1", job_spec()).status_code == 201
    assert keyed(client, "/v1/jobs", "bad-1", job_spec()).headers["Idempotent-Replayed"]


def test_a_key_in_progress_answers_409_and_an_expired_one_is_taken_anew(client, store):
    from cronman.api.idempotency import request_hash

    body = job_spec(name="slow")
    with client.application.test_request_context("/v1/jobs", method="POST", json=body):
        digest = request_hash(1 << 20)
    now = utcnow()
    assert store.idempotency.claim("anonymous", "slow-1", digest, now,
                                   now + timedelta(hours=24), now - timedelta(minutes=2)) is None
    err = error_of(keyed(client, "/v1/jobs", "slow-1", body), 409, "Idempotency-Key")
    assert err["code"] == "idempotency_in_progress"
    # A holder silent for longer than STALE_AFTER is taken over.
    old = now - timedelta(minutes=10)
    assert store.idempotency.claim("anonymous", "slow-2", digest, old,
                                   old + timedelta(hours=24), old) is None
    assert keyed(client, "/v1/jobs", "slow-2", body).status_code == 201
    # An answer past its expiry is purged by maintenance, and its key is new again.
    long_ago = now - timedelta(days=2)
    assert store.idempotency.claim("anonymous", "old-1", digest, long_ago,
                                   long_ago + timedelta(hours=24), long_ago) is None
    store.idempotency.keep("anonymous", "old-1", 201, '{"headers": {}, "body": "{}"}')
    assert store.idempotency.purge(now) == 1


def test_concurrent_calls_with_one_key_make_one_job(client, store):
    """Eight calls at once with one key: one runs; each other one gets its
    answer or a 409 ``idempotency_in_progress``; one job is made."""
    import threading

    body = job_spec(name="herd")
    answers: list[tuple[int, dict, bool]] = []
    start = threading.Barrier(8)

    def call() -> None:
        c = client.application.test_client()
        start.wait()
        resp = keyed(c, "/v1/jobs", "herd-1", body)
        answers.append((resp.status_code, resp.get_json(),
                        resp.headers.get("Idempotent-Replayed") == "true"))

    threads = [threading.Thread(target=call) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(answers) == 8
    made = [a for a in answers if a[0] == 201 and not a[2]]
    assert len(made) == 1
    for status, answer, _replayed in answers:
        if status == 201:
            assert answer == made[0][1]
        else:
            assert status == 409 and answer["error"]["code"] == "idempotency_in_progress"
    names = [j["name"] for j in client.get("/v1/jobs").get_json()["items"]]
    assert names.count("herd") == 1
