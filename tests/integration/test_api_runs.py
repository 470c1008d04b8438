"""Runs over the API: trigger, replay, backfill, the run history and its filters."""

from __future__ import annotations

from datetime import timedelta

import pytest

from cronman.config import Settings
from cronman.ids import run_id_for
from cronman.models import Run, RunUpdate
from cronman.processes.api import make_app
from cronman.timeutil import format_rfc3339, from_ms, parse_rfc3339, to_ms, utcnow
from tests.support.api import job_spec


@pytest.fixture
def client(store, database_url):
    app = make_app(Settings(database_url=database_url), store=store)
    return app.test_client()


def create(client, **overrides):
    resp = client.post("/v1/jobs", json=job_spec(**overrides))
    assert resp.status_code == 201, resp.get_json()
    return resp.get_json()


def error_of(resp, status):
    assert resp.status_code == status, (resp.status_code, resp.get_data(as_text=True))
    return resp.get_json()["error"]


def add_runs(store, job_id, times_and_statuses):
    """Claim runs as a scheduler node would, then write their outcomes."""
    runs = [Run(id=run_id_for(job_id, t), job_id=job_id, scheduled_for=t, status="claimed",
                attempt=1, node_id="sched-1", claimed_at=t, lease_expires_at=t)
            for t, _ in times_and_statuses]
    assert store.runs.claim_runs(runs) == {r.id for r in runs}
    updates = [RunUpdate(id=r.id, scheduled_for=r.scheduled_for, status=status,
                         finished_at=r.scheduled_for + timedelta(seconds=1),
                         duration_ms=1000, result={"http_status": 204} if status == "succeeded"
                         else None, error="HTTP 500" if status == "failed" else None)
               for r, (_, status) in zip(runs, times_and_statuses, strict=True)
               if status != "claimed"]
    if updates:
        store.runs.write_run_updates(updates)
    return [r.id for r in runs]


def minute(offset: int):
    base = from_ms(to_ms(utcnow()) // 60_000 * 60_000)
    return base + timedelta(minutes=offset)


def test_trigger_then_read_the_run(client):
    job = create(client)
    resp = client.post(f"/v1/jobs/{job['id']}/trigger")
    assert resp.status_code == 202
    run = resp.get_json()
    assert run["job_id"] == job["id"] and run["origin"] == "trigger"
    assert run["status"] == "claimed" and run["node_id"] is None
    assert abs((parse_rfc3339(run["scheduled_for"]) - utcnow()).total_seconds()) < 5
    got = client.get(f"/v1/runs/{run['id']}")
    # One run's answer adds its earlier attempts (none yet) to the run.
    assert got.status_code == 200 and got.get_json() == {**run, "earlier_attempts": []}
    listed = client.get(f"/v1/jobs/{job['id']}/runs").get_json()
    assert [r["id"] for r in listed["items"]] == [run["id"]]
    assert client.get(f"/v1/jobs/{job['id']}").get_json()["last_run"] == run


def test_trigger_works_on_a_paused_job(client):
    job = create(client, paused=True)
    assert client.post(f"/v1/jobs/{job['id']}/trigger").status_code == 202


@pytest.mark.parametrize("run_id", ["0190a1b2-c3d4-8e5f-8a9b-0123456789ab", "junk", "%00"])
def test_unknown_run_is_404(client, run_id):
    assert error_of(client.get(f"/v1/runs/{run_id}"), 404)["code"] == "not_found"
    error_of(client.post(f"/v1/runs/{run_id}/replay"), 404)


def test_replay(client, store):
    job = create(client)
    in_flight, done = add_runs(store, job["id"], [(minute(-2), "running"),
                                                  (minute(-1), "failed")])
    err = error_of(client.post(f"/v1/runs/{in_flight}/replay"), 409)
    assert "running" in err["message"]
    resp = client.post(f"/v1/runs/{done}/replay")
    assert resp.status_code == 202, resp.get_json()
    run = resp.get_json()
    assert run["id"] == done and run["status"] == "claimed" and run["origin"] == "replay"
    assert run["attempt"] == 2 and run["error"] is None and run["node_id"] is None
    # Now in flight itself.
    error_of(client.post(f"/v1/runs/{done}/replay"), 409)


def test_replay_of_a_deleted_jobs_run_is_409(client, store):
    job = create(client)
    (run_id,) = add_runs(store, job["id"], [(minute(-1), "succeeded")])
    assert client.delete(f"/v1/jobs/{job['id']}").status_code == 204
    assert client.get(f"/v1/runs/{run_id}").status_code == 200  # history stays readable
    error_of(client.post(f"/v1/runs/{run_id}/replay"), 409)


def test_run_history_filters_and_pages(client, store):
    job = create(client)
    statuses = ["succeeded", "failed", "succeeded", "skipped", "running", "succeeded",
                "lost", "failed", "succeeded", "succeeded"]
    times = [minute(-60 + i) for i in range(len(statuses))]
    ids = add_runs(store, job["id"], list(zip(times, statuses, strict=True)))
    newest_first = ids[::-1]

    def run_ids(query):
        resp = client.get(f"/v1/jobs/{job['id']}/runs{query}")
        assert resp.status_code == 200, resp.get_json()
        return [r["id"] for r in resp.get_json()["items"]], resp.get_json()["next_cursor"]

    assert run_ids("") == (newest_first, None)
    by_status = [i for i, s in zip(ids, statuses, strict=True) if s == "failed"][::-1]
    assert run_ids("?status=failed")[0] == by_status
    both = [i for i, s in zip(ids, statuses, strict=True) if s in ("failed", "lost")][::-1]
    assert run_ids("?status=failed,lost")[0] == both
    assert run_ids("?status=failed&status=lost")[0] == both
    since, until = format_rfc3339(times[3]), format_rfc3339(times[6])
    window = run_ids(f"?since={since}&until={until}")[0]
    assert set(window) <= set(ids[3:7]) and set(ids[4:6]) <= set(window)
    # Pages of 3, newest first, no gaps, no repeats.
    seen, cursor = [], None
    while True:
        page, cursor = run_ids("?limit=3" + (f"&cursor={cursor}" if cursor else ""))
        assert len(page) <= 3
        seen += page
        if not cursor:
            break
    assert seen == newest_first
    for query, field in [("?status=done", "status"), ("?since=yesterday", "since"),
                         ("?until=2026-01-01T00:00:00", "until"), ("?limit=0", "limit"),
                         ("?limit=1001", "limit"), ("?cursor=@@@", "cursor")]:
        assert error_of(client.get(f"/v1/jobs/{job['id']}/runs{query}"), 400)["field"] == field


def test_backfill(client, store):
    anchor = minute(-30)
    job = create(client, schedule={"kind": "interval", "every": 60,
                                   "anchor": format_rfc3339(anchor)})
    add_runs(store, job["id"], [(minute(-5), "succeeded")])
    body = {"since": format_rfc3339(minute(-10)), "until": format_rfc3339(minute(-1))}
    resp = client.post(f"/v1/jobs/{job['id']}/backfill", json=body)
    assert resp.status_code == 202, resp.get_json()
    answer = resp.get_json()
    # Ten fire times in [-10, -1] (both ends included); one already has a run.
    assert answer == {"requested": 9, "fire_times": 10}
    runs = client.get(f"/v1/jobs/{job['id']}/runs?limit=100").get_json()["items"]
    backfilled = [r for r in runs if r["origin"] == "backfill"]
    assert len(backfilled) == 9
    assert all(r["status"] == "claimed" and r["node_id"] is None for r in backfilled)
    # Again: nothing left to request.
    again = client.post(f"/v1/jobs/{job['id']}/backfill", json=body).get_json()
    assert again == {"requested": 0, "fire_times": 10}


def test_backfill_limits(client):
    job = create(client, schedule={"kind": "interval", "every": 1,
                                   "anchor": "2026-01-01T00:00:00Z"})
    now = utcnow()
    too_many = {"since": format_rfc3339(now - timedelta(seconds=20_000)),
                "until": format_rfc3339(now - timedelta(seconds=10))}
    err = error_of(client.post(f"/v1/jobs/{job['id']}/backfill", json=too_many), 400)
    assert err["field"] == "until" and "10000" in err["message"]
    for body, field in [({}, "since"), ({"since": "x", "until": "y"}, "since"),
                        ({"since": format_rfc3339(now), "until": format_rfc3339(now)}, "since"),
                        ({"since": format_rfc3339(now - timedelta(seconds=5)),
                          "until": format_rfc3339(now), "extra": 1}, "extra")]:
        assert error_of(client.post(f"/v1/jobs/{job['id']}/backfill", json=body),
                        400)["field"] == field
    error_of(client.post(f"/v1/jobs/{job['id']}/backfill", data=b"{",
                         content_type="application/json"), 400)
    # A body that does not say it is JSON is not read (a cross-site "simple" request).
    error_of(client.post(f"/v1/jobs/{job['id']}/backfill", data=b"{", content_type="x"), 415)
