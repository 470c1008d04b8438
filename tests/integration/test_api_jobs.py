"""The /v1/jobs resources over the Flask test client, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from cronman.config import Settings
from cronman.models import JobFilter
from cronman.processes.api import make_app
from cronman.timeutil import format_rfc3339, parse_rfc3339, utcnow
from tests.support.api import job_spec

SECRET = "Bearer abcdefghijklmnop"


@pytest.fixture
def client(store, database_url):
    app = make_app(Settings(database_url=database_url), store=store)
    return app.test_client()


def create(client, spec=None, **overrides):
    resp = client.post("/v1/jobs", json=spec if spec is not None else job_spec(**overrides))
    assert resp.status_code == 201, resp.get_json()
    return resp.get_json()


def error_of(resp, status):
    assert resp.status_code == status, (resp.status_code, resp.get_data(as_text=True))
    body = resp.get_json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "field"}
    assert body["error"]["message"]
    return body["error"]


# -- create ------------------------------------------------------------------


def test_create_returns_the_normalised_job(client):
    resp = client.post("/v1/jobs", json=job_spec(labels={"team": "billing"}))
    assert resp.status_code == 201
    job = resp.get_json()
    assert resp.headers["Location"] == f"/v1/jobs/{job['id']}"
    assert job["name"] == "digest" and job["namespace"] == "default"
    assert job["version"] == 1
    assert job["retry"] == {"max_attempts": 3, "min_backoff": 1, "max_backoff": 60}
    assert job["misfire"] == {"policy": "fire_once", "grace": 300}
    assert job["delivery"] == "at_least_once" and job["concurrency"] == "allow"
    assert job["priority"] == 0 and job["paused"] is False
    assert job["labels"] == {"team": "billing"}
    assert job["start_at"] is None and job["end_at"] is None and job["dead_letter"] is None
    for key in ("created_at", "updated_at", "next_fire_at"):
        assert job[key].endswith("Z")
    nxt = parse_rfc3339(job["next_fire_at"])
    assert utcnow() < nxt <= utcnow() + timedelta(days=1)
    assert nxt.astimezone(ZoneInfo("Europe/Berlin")).hour == 7
    assert "last_run" not in job  # only GET one carries it


def test_create_then_get(client):
    job = create(client)
    resp = client.get(f"/v1/jobs/{job['id']}")
    assert resp.status_code == 200
    got = resp.get_json()
    assert got["last_run"] is None and got["buffered"] == 0
    assert {k: v for k, v in got.items() if k not in ("last_run", "buffered")} == job


PAST = format_rfc3339(datetime(2020, 1, 1, tzinfo=UTC))


@pytest.mark.parametrize("overrides, field", [
    ({"schedule": {"kind": "cron", "cron": "99 * * * *"}}, "schedule.cron"),
    ({"schedule": {"kind": "cron", "cron": "0 7 * * *", "timezone": "Europe/Atlantis"}},
     "schedule.timezone"),
    ({"schedule": {"kind": "once", "at": PAST}}, "schedule.at"),
    ({"target": {"kind": "http", "url": "https://a.example.com", "body": "x" * 65537}},
     "target.body"),
    ({"target": {"kind": "http", "url": "gopher://a.example.com/"}}, "target.url"),
    ({"target": {"kind": "http", "url": "https://a.example.com", "retries": 3}},
     "target.retries"),
    ({"owner": "me"}, "owner"),
    ({"retry": {"max_attempts": 3, "jitter": True}}, "retry.jitter"),
    ({"priority": True}, "priority"),
    ({"priority": "high"}, "priority"),
    ({"paused": "yes"}, "paused"),
    ({"labels": {"team": 7}}, "labels.team"),
    ({"name": ""}, "name"),
    ({"name": None}, "name"),
    ({"id": "0190a1b2-c3d4-7e5f-8a9b-0123456789ab"}, "id"),
    ({"dead_letter": {"kind": "container", "image": "busybox"}}, "dead_letter.kind"),
    ({"end_at": "2030-01-01T00:00:00Z", "start_at": "2031-01-01T00:00:00Z"}, "end_at"),
])
def test_create_refuses_invalid_jobs(client, store, overrides, field):
    err = error_of(client.post("/v1/jobs", json=job_spec(**overrides)), 400)
    assert err["field"] == field
    assert err["code"] == "invalid"
    assert store.jobs.list_jobs(JobFilter(), 10, None).items == []


@pytest.mark.parametrize("data", [
    b'{"name": "x", ', b"not json", b"", b"   ", b"[1, 2]", b'"text"', b"null",
    b'{"name": "x", "priority": NaN}', b"\xff\xfe",
])
def test_malformed_or_non_object_bodies_are_400(client, data):
    resp = client.post("/v1/jobs", data=data, content_type="application/json")
    error_of(resp, 400)


@pytest.mark.parametrize("raw, field", [
    (r'"labels": {"team": "a\u0000b"}', "labels.team"),
    (r'"labels": {"team": "\ud800"}', "labels.team"),
    (r'"labels": {"te\u0000am": "x"}', "labels.te\x00am"),
])
def test_unstorable_strings_are_400(client, raw, field):
    data = (r'{"name": "n", "schedule": {"kind": "interval", "every": 60}, '
            r'"target": {"kind": "http", "url": "https://a.example.com"}, ' + raw + "}")
    err = error_of(client.post("/v1/jobs", data=data, content_type="application/json"), 400)
    assert err["field"] == field


def test_request_body_over_the_cap_is_413(client):
    spec = job_spec(labels={"pad": "x"})
    spec["target"]["body"] = "y" * (2 * 1024 * 1024)
    err = error_of(client.post("/v1/jobs", data=json.dumps(spec),
                               content_type="application/json"), 413)
    assert err["code"] == "too_large"
    assert "request body" in err["message"]


def test_name_taken_in_namespace_is_409(client):
    create(client)
    err = error_of(client.post("/v1/jobs", json=job_spec()), 409)
    assert err["field"] == "name"
    # The same name in another namespace is fine.
    create(client, namespace="other")


# -- bulk --------------------------------------------------------------------


def test_bulk_creates_all_in_order(client):
    specs = [job_spec(f"job-{i}", labels={"i": str(i)}) for i in range(5)]
    resp = client.post("/v1/jobs/bulk", json={"jobs": specs})
    assert resp.status_code == 201
    items = resp.get_json()["items"]
    assert [j["name"] for j in items] == [f"job-{i}" for i in range(5)]
    assert len({j["id"] for j in items}) == 5
    listed = client.get("/v1/jobs").get_json()["items"]
    assert sorted(j["name"] for j in listed) == sorted(j["name"] for j in items)


def test_bulk_is_all_or_nothing(client):
    bad = job_spec("b", schedule={"kind": "cron", "cron": "* * * * *", "timezone": "No/Where"})
    err = error_of(client.post("/v1/jobs/bulk", json={"jobs": [job_spec("a"), bad]}), 400)
    assert err["field"] == "jobs[1].schedule.timezone"
    create(client, name="taken")
    err = error_of(client.post("/v1/jobs/bulk", json={
        "jobs": [job_spec("c"), job_spec("d"), job_spec("taken")]}), 409)
    assert err["field"] == "jobs[2].name"
    err = error_of(client.post("/v1/jobs/bulk", json={
        "jobs": [job_spec("e"), job_spec("e")]}), 409)
    assert err["field"] == "jobs[1].name"
    err = error_of(client.post("/v1/jobs/bulk", json={"jobs": [job_spec("taken")]}), 409)
    assert err["field"] == "jobs[0].name"
    names = [j["name"] for j in client.get("/v1/jobs").get_json()["items"]]
    assert names == ["taken"]


def test_bulk_limits(client):
    err = error_of(client.post("/v1/jobs/bulk",
                               json={"jobs": [job_spec(f"j{i}") for i in range(1001)]}), 400)
    assert err["field"] == "jobs"
    assert error_of(client.post("/v1/jobs/bulk", json={"jobs": []}), 400)["field"] == "jobs"
    assert error_of(client.post("/v1/jobs/bulk", json=[job_spec()]), 400)["field"] is None
    assert error_of(client.post("/v1/jobs/bulk", json={"jobs": [], "x": 1}),
                    400)["field"] == "x"


def test_bulk_of_1000_jobs(client):
    specs = [job_spec(f"many-{i}") for i in range(1000)]
    resp = client.post("/v1/jobs/bulk", json={"jobs": specs})
    assert resp.status_code == 201
    assert len(resp.get_json()["items"]) == 1000


# -- read, list, pagination ---------------------------------------------------


@pytest.mark.parametrize("job_id", ["0190a1b2-c3d4-7e5f-8a9b-0123456789ab", "nope",
                                    "x" * 80, "%00", "é"])
def test_unknown_job_is_404(client, job_id):
    for method in ("get", "put", "patch", "delete"):
        resp = getattr(client, method)(f"/v1/jobs/{job_id}", json=job_spec())
        assert error_of(resp, 404)["code"] == "not_found"
    for action in ("pause", "resume", "trigger"):
        error_of(client.post(f"/v1/jobs/{job_id}/{action}"), 404)
    error_of(client.get(f"/v1/jobs/{job_id}/next"), 404)
    error_of(client.get(f"/v1/jobs/{job_id}/runs"), 404)


def test_list_filters(client):
    a = create(client, name="a", namespace="billing", labels={"team": "pay", "tier": "1"})
    b = create(client, name="b", namespace="billing", labels={"team": "pay", "tier": "2"},
               paused=True)
    c = create(client, name="c", namespace="search", labels={"team": "find"})

    def names(query):
        resp = client.get("/v1/jobs" + query)
        assert resp.status_code == 200, resp.get_json()
        body = resp.get_json()
        assert body["next_cursor"] is None
        return sorted(j["name"] for j in body["items"])

    assert names("") == ["a", "b", "c"]
    assert names("?namespace=billing") == ["a", "b"]
    assert names("?namespace=nothing") == []
    assert names("?label=team:pay") == ["a", "b"]
    assert names("?label=team:pay&label=tier:2") == ["b"]
    assert names("?label=team:pay&label=tier:3") == []
    assert names("?label=team:find") == ["c"]
    assert names("?paused=true") == ["b"]
    assert names("?paused=false") == ["a", "c"]
    assert names("?namespace=billing&paused=false&label=tier:1") == ["a"]
    assert {a["id"], b["id"], c["id"]} == {j["id"] for j in client.get("/v1/jobs").get_json()[
        "items"]}
    for query, field in [("?limit=0", "limit"), ("?limit=1001", "limit"), ("?limit=x", "limit"),
                         ("?paused=maybe", "paused"), ("?label=nocolon", "label"),
                         ("?cursor=%%%garbage", "cursor"), ("?namespace=a%20b", "namespace")]:
        assert error_of(client.get("/v1/jobs" + query), 400)["field"] == field


def test_exact_name_filter(client):
    """``name=``: the jobs of exactly that name (how clients find namespace/name's id)."""
    digest = create(client, name="daily-digest", namespace="examples")
    create(client, name="daily-digest-2", namespace="examples")
    create(client, name="Daily-Digest", namespace="examples")
    other = create(client, name="daily-digest", namespace="other", paused=True)
    create(client, name="reports/daily", namespace="examples")

    def ids(query):
        resp = client.get("/v1/jobs" + query)
        assert resp.status_code == 200, resp.get_json()
        return [j["id"] for j in resp.get_json()["items"]]

    assert ids("?namespace=examples&name=daily-digest") == [digest["id"]]
    assert sorted(ids("?name=daily-digest")) == sorted([digest["id"], other["id"]])
    assert ids("?name=daily-digest&paused=true") == [other["id"]]
    assert ids("?namespace=examples&name=daily") == []
    assert len(ids("?namespace=examples&name=reports%2Fdaily")) == 1
    assert ids("?name=daily-digest&sort=name") == [digest["id"], other["id"]]
    assert error_of(client.get("/v1/jobs?name="), 400)["field"] == "name"
    assert error_of(client.get("/v1/jobs?name=" + "x" * 257), 400)["field"] == "name"
    assert error_of(client.get("/v1/jobs?name=a%00b"), 400)["field"] == "name"
    assert error_of(client.get("/v1/jobs?name=xyz!"), 400)["field"] == "name"


def test_a_missing_job_id_is_named_as_an_id(client):
    job_id = "0190a1b2-c3d4-7e5f-8a9b-0123456789ab"
    for resp in (client.get(f"/v1/jobs/{job_id}"), client.delete(f"/v1/jobs/{job_id}"),
                 client.get(f"/v1/jobs/{job_id}/history")):
        assert error_of(resp, 404)["message"] == f"no job with id '{job_id}'"


def test_pagination_while_jobs_come_and_go(client):
    """No job that existed throughout is skipped, none is returned twice."""
    ids = [j["id"] for j in client.post("/v1/jobs/bulk", json={
        "jobs": [job_spec(f"p{i:03d}") for i in range(60)]}).get_json()["items"]]
    deleted: set[str] = set()
    seen: list[str] = []
    cursor = None
    page_no = 0
    while True:
        query = "?limit=7" + (f"&cursor={cursor}" if cursor else "")
        body = client.get("/v1/jobs" + query).get_json()
        assert len(body["items"]) <= 7
        seen += [j["id"] for j in body["items"]]
        cursor = body["next_cursor"]
        if not cursor:
            break
        page_no += 1
        # Between pages: delete one job already seen and one not yet seen, add two.
        for victim in (seen[0], ids[-page_no]):
            if victim not in deleted:
                assert client.delete(f"/v1/jobs/{victim}").status_code == 204
                deleted.add(victim)
        for k in range(2):
            create(client, name=f"new-{page_no}-{k}")
    assert len(seen) == len(set(seen)), "a job was returned twice"
    survivors = set(ids) - deleted
    assert survivors <= set(seen), "a job that existed throughout was skipped"


def test_limit_and_cursor_walk_everything(client):
    client.post("/v1/jobs/bulk", json={"jobs": [job_spec(f"w{i}") for i in range(25)]})
    body = client.get("/v1/jobs?limit=10").get_json()
    assert len(body["items"]) == 10 and body["next_cursor"]
    body2 = client.get(f"/v1/jobs?limit=10&cursor={body['next_cursor']}").get_json()
    body3 = client.get(f"/v1/jobs?limit=10&cursor={body2['next_cursor']}").get_json()
    assert len(body3["items"]) == 5 and body3["next_cursor"] is None
    all_ids = [j["id"] for b in (body, body2, body3) for j in b["items"]]
    assert all_ids == sorted(all_ids) and len(set(all_ids)) == 25
    assert len(client.get("/v1/jobs").get_json()["items"]) == 25  # default limit 100


# -- replace, merge, delete ---------------------------------------------------


def test_put_replaces_the_whole_definition(client):
    job = create(client, labels={"a": "1"}, priority=5, paused=True)
    spec = job_spec(schedule={"kind": "interval", "every": 60})
    resp = client.put(f"/v1/jobs/{job['id']}", json=spec)
    assert resp.status_code == 200, resp.get_json()
    new = resp.get_json()
    assert new["version"] == 2 and new["id"] == job["id"]
    assert new["created_at"] == job["created_at"]
    assert new["labels"] == {} and new["priority"] == 0 and new["paused"] is False
    assert new["schedule"]["kind"] == "interval" and new["schedule"]["every"] == 60
    err = error_of(client.put(f"/v1/jobs/{job['id']}", json={"name": "x"}), 400)
    assert err["field"] == "schedule"


def test_get_then_put_round_trip_keeps_secrets(client, store):
    job = create(client)
    got = client.get(f"/v1/jobs/{job['id']}").get_json()
    assert got["target"]["headers"]["Authorization"] != SECRET
    got["labels"] = {"edited": "yes"}
    resp = client.put(f"/v1/jobs/{job['id']}", json=got)
    assert resp.status_code == 200, resp.get_json()
    stored = store.jobs.get_job(job["id"])
    assert stored.target["headers"] == {"Authorization": SECRET, "X-Short": "k"}
    assert stored.labels == {"edited": "yes"}
    # Replaying the same body now is stale: the version moved on.
    err = error_of(client.put(f"/v1/jobs/{job['id']}", json=got), 409)
    assert err["field"] == "version"
    got["version"] = stored.version
    got["id"] = "0190a1b2-c3d4-7e5f-8a9b-0123456789ab"
    assert error_of(client.put(f"/v1/jobs/{job['id']}", json=got), 400)["field"] == "id"
    # A header actually changed is taken as sent.
    got["id"] = job["id"]
    got["target"]["headers"]["Authorization"] = "Bearer new-secret-value"
    assert client.put(f"/v1/jobs/{job['id']}", json=got).status_code == 200
    assert store.jobs.get_job(job["id"]).target["headers"]["Authorization"] == \
        "Bearer new-secret-value"


def test_patch_merges_top_level_keys(client, store):
    job = create(client, labels={"a": "1"}, retry={"max_attempts": 7},
                 dead_letter={"kind": "http", "url": "https://dlq.example.com/x",
                              "headers": {"X-Token": "dead-letter-secret"}})
    resp = client.patch(f"/v1/jobs/{job['id']}", json={"priority": 9})
    assert resp.status_code == 200, resp.get_json()
    new = resp.get_json()
    assert new["priority"] == 9 and new["labels"] == {"a": "1"}
    assert new["retry"]["max_attempts"] == 7 and new["version"] == 2
    stored = store.jobs.get_job(job["id"])
    assert stored.target["headers"]["Authorization"] == SECRET
    assert stored.dead_letter["headers"]["X-Token"] == "dead-letter-secret"
    # Nested objects are replaced whole (retry defaults come back).
    new = client.patch(f"/v1/jobs/{job['id']}", json={"retry": {"min_backoff": 2}}).get_json()
    assert new["retry"] == {"max_attempts": 3, "min_backoff": 2, "max_backoff": 60}
    # Sending back a redacted target keeps the stored secret.
    resp = client.patch(f"/v1/jobs/{job['id']}",
                        json={"target": new["target"], "dead_letter": new["dead_letter"]})
    assert resp.status_code == 200
    stored = store.jobs.get_job(job["id"])
    assert stored.target["headers"]["Authorization"] == SECRET
    assert stored.dead_letter["headers"]["X-Token"] == "dead-letter-secret"
    # null clears an optional key; unknown keys and bad values are refused.
    assert client.patch(f"/v1/jobs/{job['id']}",
                        json={"dead_letter": None}).get_json()["dead_letter"] is None
    assert error_of(client.patch(f"/v1/jobs/{job['id']}", json={"colour": 1}),
                    400)["field"] == "colour"
    assert error_of(client.patch(f"/v1/jobs/{job['id']}", json={"name": None}),
                    400)["field"] == "name"
    assert error_of(client.patch(f"/v1/jobs/{job['id']}",
                                 json={"schedule": {"kind": "cron", "cron": "bad"}}),
                    400)["field"] == "schedule.cron"
    assert error_of(client.patch(f"/v1/jobs/{job['id']}", json=[1]), 400)


def test_rename_to_a_taken_name_is_409(client):
    create(client, name="one")
    two = create(client, name="two")
    for method in (client.patch, client.put):
        body = {"name": "one"} if method is client.patch else job_spec("one")
        assert error_of(method(f"/v1/jobs/{two['id']}", json=body), 409)["field"] == "name"


def test_past_once_schedule_survives_an_unrelated_put(client, store):
    at = format_rfc3339(utcnow() + timedelta(seconds=2))
    job = create(client, schedule={"kind": "once", "at": at})
    # Let the time pass, then change only the labels.
    time.sleep(max(0.0, (parse_rfc3339(at) - utcnow()).total_seconds()) + 0.05)
    got = client.get(f"/v1/jobs/{job['id']}").get_json()
    assert got["next_fire_at"] is None
    resp = client.patch(f"/v1/jobs/{job['id']}", json={"labels": {"x": "y"}})
    assert resp.status_code == 200, resp.get_json()
    err = error_of(client.patch(f"/v1/jobs/{job['id']}", json={
        "schedule": {"kind": "once", "at": PAST}}), 400)
    assert err["field"] == "schedule.at"


def test_delete(client):
    job = create(client)
    assert client.delete(f"/v1/jobs/{job['id']}").status_code == 204
    error_of(client.get(f"/v1/jobs/{job['id']}"), 404)
    error_of(client.delete(f"/v1/jobs/{job['id']}"), 404)
    # The name is free again.
    create(client)


def test_pause_and_resume(client):
    job = create(client)
    paused = client.post(f"/v1/jobs/{job['id']}/pause").get_json()
    assert paused["paused"] is True and paused["next_fire_at"] is None
    assert paused["version"] == 2
    again = client.post(f"/v1/jobs/{job['id']}/pause").get_json()
    assert again["version"] == 2  # already paused: nothing written
    resumed = client.post(f"/v1/jobs/{job['id']}/resume")
    assert resumed.status_code == 200
    assert resumed.get_json()["paused"] is False and resumed.get_json()["next_fire_at"]


# -- next fire times ---------------------------------------------------------


def test_next_fire_times(client):
    job = create(client, schedule={"kind": "interval", "every": 60,
                                   "anchor": "2026-01-01T00:00:00Z"})
    body = client.get(f"/v1/jobs/{job['id']}/next").get_json()
    times = [parse_rfc3339(t) for t in body["fire_times"]]
    assert len(times) == 10
    assert all(b - a == timedelta(seconds=60) for a, b in zip(times, times[1:], strict=False))
    assert times[0] > utcnow() - timedelta(seconds=1)
    assert len(client.get(f"/v1/jobs/{job['id']}/next?count=100").get_json()["fire_times"]) \
        == 100
    for bad in ("0", "101", "x"):
        assert error_of(client.get(f"/v1/jobs/{job['id']}/next?count={bad}"),
                        400)["field"] == "count"
    once = create(client, name="once", schedule={
        "kind": "once", "at": format_rfc3339(utcnow() + timedelta(hours=1))})
    assert len(client.get(f"/v1/jobs/{once['id']}/next?count=5").get_json()["fire_times"]) == 1


# -- redaction ---------------------------------------------------------------


def test_secrets_never_leave_in_full(client):
    job = create(client, dead_letter={"kind": "http", "url": "https://dlq.example.com/",
                                      "headers": {"X-Api-Key": "dlq-key-0123456789"}})
    answers = [
        json.dumps(job),
        client.get(f"/v1/jobs/{job['id']}").get_data(as_text=True),
        client.get("/v1/jobs").get_data(as_text=True),
        client.patch(f"/v1/jobs/{job['id']}", json={"priority": 1}).get_data(as_text=True),
        client.post(f"/v1/jobs/{job['id']}/pause").get_data(as_text=True),
        client.post("/v1/jobs/bulk", json={"jobs": [job_spec("other")]}).get_data(as_text=True),
    ]
    for text in answers:
        assert "abcdefghijklmnop" not in text
        assert "dlq-key-0123456789" not in text
    assert job["target"]["headers"] == {"Authorization": "Bear…", "X-Short": "***"}
    assert job["dead_letter"]["headers"] == {"X-Api-Key": "dlq-…"}


@pytest.mark.parametrize("new_url", [
    "https://attacker.example.net/digest",      # another host
    "http://hooks.example.com/digest",          # another scheme
    "https://hooks.example.com:8443/digest",    # another port
])
def test_stored_secrets_never_follow_a_changed_destination(client, store, new_url):
    """Found by probing: GET a job, point its target elsewhere, PUT it back --
    the stored Authorization was restored and would have gone to the new host."""
    job = create(client)
    got = client.get(f"/v1/jobs/{job['id']}").get_json()
    got.pop("last_run")
    got["target"]["url"] = new_url
    err = error_of(client.put(f"/v1/jobs/{job['id']}", json=got), 400)
    assert err["field"] == "target.headers.Authorization"
    assert "give the value again" in err["message"]
    err = error_of(client.patch(f"/v1/jobs/{job['id']}", json={"target": got["target"]}), 400)
    assert err["field"] == "target.headers.Authorization"
    assert store.jobs.get_job(job["id"]).target["url"] == "https://hooks.example.com/digest"
    # Given again, the values are taken (the short one too, once it is given).
    got["target"]["headers"] = {"Authorization": "Bearer for-the-new-host", "X-Short": "n"}
    assert client.put(f"/v1/jobs/{job['id']}", json=got).status_code == 200
    stored = store.jobs.get_job(job["id"])
    assert stored.target["url"] == new_url
    assert stored.target["headers"] == {"Authorization": "Bearer for-the-new-host",
                                        "X-Short": "n"}


def test_same_destination_keeps_secrets_and_dead_letters_are_guarded_too(client, store):
    job = create(client, dead_letter={"kind": "http", "url": "https://dlq.example.com/in",
                                      "headers": {"X-Token": "dead-letter-secret"}})
    got = client.get(f"/v1/jobs/{job['id']}").get_json()
    got.pop("last_run")
    # Another path (and an explicit default port) on the same host keeps them.
    got["target"]["url"] = "https://HOOKS.example.com:443/other?x=1"
    resp = client.put(f"/v1/jobs/{job['id']}", json=got)
    assert resp.status_code == 200, resp.get_json()
    assert store.jobs.get_job(job["id"]).target["headers"]["Authorization"] == SECRET
    got = resp.get_json()
    got["dead_letter"]["url"] = "https://elsewhere.example.org/in"
    err = error_of(client.put(f"/v1/jobs/{job['id']}", json=got), 400)
    assert err["field"] == "dead_letter.headers.X-Token"
    # A container's env follows neither another image nor another command
    # (``env`` would print it into the run's logs_tail).
    box = create(client, spec=job_spec("box", target={
        "kind": "container", "image": "busybox", "command": ["true"],
        "env": {"DB_PASSWORD": "hunter2hunter2"}}))
    for change in ({"command": ["env"]}, {"image": "alpine"}):
        err = error_of(client.patch(f"/v1/jobs/{box['id']}",
                                    json={"target": {**box["target"], **change}}), 400)
        assert err["field"] == "target.env.DB_PASSWORD"
    assert client.patch(f"/v1/jobs/{box['id']}", json={"target": {
        **box["target"], "timeout": 60}}).status_code == 200
    assert store.jobs.get_job(box["id"]).target["env"] == {"DB_PASSWORD": "hunter2hunter2"}


@pytest.mark.parametrize("key, stored, moved, field", [
    ("target", {"kind": "http", "url": "https://hooks.example.com/x",
                "headers": {"X-Api-Key": "target-secret-123"}},
     {"url": "https://elsewhere.example.org/x"}, "target.headers.X-Api-Key"),
    ("target", {"kind": "container", "image": "busybox", "command": ["true"],
                "env": {"TOKEN": "container-secret"}},
     {"image": "evil/image"}, "target.env.TOKEN"),
    ("dead_letter", {"kind": "http", "url": "https://dlq.example.com/in",
                     "headers": {"X-Token": "dead-letter-secret"}},
     {"url": "https://dlq.example.com:444/in"}, "dead_letter.headers.X-Token"),
])
def test_a_stored_secret_never_follows_a_changed_destination_of_any_kind(
        client, store, key, stored, moved, field):
    """One rule for every kind that holds secrets (sqs targets hold none;
    notification channels and rules: test_api_notifications)."""
    job = create(client, **{key: stored})
    for method in (client.patch, client.put):
        body = {key: {**job[key], **moved}}
        if method == client.put:
            body = {**job, **body}
        err = error_of(method(f"/v1/jobs/{job['id']}", json=body), 400)
        assert err["field"] == field, err
    kept = getattr(store.jobs.get_job(job["id"]), key)
    assert {k: kept[k] for k in stored} == stored


def test_public_headers_are_shown_in_full(client):
    job = create(client, target={"kind": "http", "url": "https://hooks.example.com/x",
                                 "headers": {"Content-Type": "application/json",
                                             "accept": "text/plain",
                                             "X-Api-Key": "0123456789abcdef"}})
    assert job["target"]["headers"] == {"Content-Type": "application/json",
                                        "accept": "text/plain", "X-Api-Key": "0123…"}


@pytest.mark.parametrize("cursor", [
    "ajoAeA==",                 # found by probing: base64 of "j:\0x", a 500 on PostgreSQL
    "j:%00x", "%00", "x" * 37, "0190a1b2 c3d4", "🙂", "1.5",
])
def test_an_invalid_cursor_is_a_400_on_every_backend(client, cursor):
    job = create(client)
    for path in ("/v1/jobs", f"/v1/jobs/{job['id']}/runs"):
        err = error_of(client.get(f"{path}?cursor={cursor}"), 400)
        assert err["field"] == "cursor", (path, cursor)


def test_cursors_are_positions_any_of_which_is_valid(client):
    jobs = [create(client, name=f"page-{i}") for i in range(3)]
    first = client.get("/v1/jobs?limit=2").get_json()
    assert [j["id"] for j in first["items"]] == sorted(j["id"] for j in jobs)[:2]
    rest = client.get(f"/v1/jobs?limit=2&cursor={first['next_cursor']}").get_json()
    assert [j["id"] for j in rest["items"]] == sorted(j["id"] for j in jobs)[2:]
    assert rest["next_cursor"] is None
    # Any text of the documented form is a position, even one never handed out.
    for cursor in ("0", "ffffffff-ffff", "00000000-0000-0000-0000-000000000000", ""):
        assert client.get(f"/v1/jobs?cursor={cursor}").status_code == 200
    for cursor in ("0", "253402300799999999"[:17], "1700000000000000"):
        assert client.get(f"/v1/jobs/{jobs[0]['id']}/runs?cursor={cursor}").status_code == 200
