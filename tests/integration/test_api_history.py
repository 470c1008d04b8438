"""Job history: every change through the API recorded with actor, time, request id and
before/after definitions (secrets redacted), in the transaction of the change."""

from __future__ import annotations

from datetime import timedelta

import pytest
from click.testing import CliRunner

from cronman.cli import cli
from cronman.config import Settings
from cronman.processes.api import make_app
from cronman.timeutil import format_rfc3339, utcnow
from tests.conftest import _truncate_pg
from tests.support.api import job_spec, running_api

SECRET = "Bearer abcdefghijklmnop"


@pytest.fixture
def client(store, database_url):
    app = make_app(Settings(database_url=database_url), store=store)
    return app.test_client()


def history(client, job_id, **query):
    resp = client.get(f"/v1/jobs/{job_id}/history", query_string=query)
    assert resp.status_code == 200, resp.get_data(as_text=True)
    return resp.get_json()


def ok(resp, status=200):
    assert resp.status_code == status, resp.get_data(as_text=True)
    return resp.get_json()


def test_every_action_is_recorded_with_before_and_after(client):
    job = ok(client.post("/v1/jobs", json=job_spec(), headers={"X-Request-Id": "req-create"}),
             201)
    jid = job["id"]
    ok(client.put(f"/v1/jobs/{jid}", json=job_spec(priority=3)))
    ok(client.patch(f"/v1/jobs/{jid}", json={"labels": {"team": "a"}}))
    ok(client.post(f"/v1/jobs/{jid}/pause"))
    ok(client.post(f"/v1/jobs/{jid}/pause"))  # already paused: no change, no entry
    ok(client.post(f"/v1/jobs/{jid}/resume"))
    run = ok(client.post(f"/v1/jobs/{jid}/trigger"), 202)
    now = utcnow()
    ok(client.post(f"/v1/jobs/{jid}/backfill", json={
        "since": format_rfc3339(now - timedelta(days=3)), "until": format_rfc3339(now)}), 202)
    resp = client.delete(f"/v1/jobs/{jid}", headers={"X-Request-Id": "req-delete"})
    assert resp.status_code == 204
    assert resp.headers["X-Request-Id"] == "req-delete"

    items = history(client, jid)["items"]
    assert [e["action"] for e in items] == ["delete", "backfill", "trigger", "resume", "pause",
                                           "patch", "update", "create"]
    assert [e["job_version"] for e in items] == [6, 5, 5, 5, 4, 3, 2, 1]
    by_action = {e["action"]: e for e in items}
    for e in items:
        assert e["actor"] == {"token_id": None, "name": "anonymous"}
        assert e["request_id"] and e["at"] and e["job_id"] == jid
        assert e["namespace"] == "default" and e["job_name"] == "digest"
    assert by_action["create"]["request_id"] == "req-create"
    assert by_action["delete"]["request_id"] == "req-delete"
    assert by_action["create"]["before"] is None
    assert by_action["create"]["after"]["version"] == 1
    assert by_action["delete"]["after"] is None
    assert by_action["delete"]["before"]["version"] == 5
    assert by_action["update"]["changed"] == ["priority"]
    assert by_action["update"]["before"]["priority"] == 0
    assert by_action["update"]["after"]["priority"] == 3
    assert by_action["patch"]["changed"] == ["labels"]
    assert by_action["pause"]["changed"] == ["paused"]
    assert by_action["resume"]["after"]["paused"] is False
    assert by_action["trigger"]["changed"] == []
    assert by_action["trigger"]["details"] == {"run_id": run["id"],
                                               "scheduled_for": run["scheduled_for"]}
    backfill = by_action["backfill"]["details"]
    assert backfill["fire_times"] == 3 and backfill["requested"] == 3
    assert backfill["since"] and backfill["until"]
    # Secrets are never stored in full.
    text = str(items)
    assert "abcdefghijklmnop" not in text
    assert by_action["create"]["after"]["target"]["headers"] == {
        "Authorization": "Bear…", "X-Short": "***"}


def test_replay_and_bulk_create_are_recorded(client, store):
    items = ok(client.post("/v1/jobs/bulk", json={"jobs": [job_spec("a"), job_spec("b")]}),
               201)["items"]
    for job in items:
        (entry,) = history(client, job["id"])["items"]
        assert entry["action"] == "create" and entry["job_name"] == job["name"]
    jid = items[0]["id"]
    run = ok(client.post(f"/v1/jobs/{jid}/trigger"), 202)
    store.runs.write_run_updates([_finished(store, run["id"])])
    replayed = ok(client.post(f"/v1/runs/{run['id']}/replay"), 202)
    entry = history(client, jid)["items"][0]
    assert entry["action"] == "replay"
    assert entry["details"]["run_id"] == run["id"]
    assert entry["details"]["attempt"] == replayed["attempt"] == 1


def _finished(store, run_id):
    from cronman.models import RunUpdate

    run = store.runs.get_run(run_id)
    now = utcnow()
    return RunUpdate(id=run.id, scheduled_for=run.scheduled_for, status="succeeded",
                     finished_at=now, result={"http_status": 204})


def test_a_refused_change_records_nothing(client):
    a = ok(client.post("/v1/jobs", json=job_spec("a")), 201)
    ok(client.post("/v1/jobs", json=job_spec("b")), 201)
    resp = client.put(f"/v1/jobs/{a['id']}", json=job_spec("b"))  # name taken
    assert resp.status_code == 409
    assert [e["action"] for e in history(client, a["id"])["items"]] == ["create"]


def test_token_actor_namespaces_and_deleted_jobs(client, store):
    billing = ok(client.post("/v1/jobs", json=job_spec("x", namespace="billing")), 201)["id"]
    search = ok(client.post("/v1/jobs", json=job_spec("y", namespace="search")), 201)["id"]
    secret, record = store.tokens.create_token("deployer", ["billing"])
    auth = {"Authorization": f"Bearer {secret}"}
    ok(client.post(f"/v1/jobs/{billing}/pause", headers=auth))
    assert client.delete(f"/v1/jobs/{billing}", headers=auth).status_code == 204
    resp = client.get(f"/v1/jobs/{billing}/history", headers=auth)
    items = ok(resp)["items"]  # a deleted job keeps its history
    assert [e["action"] for e in items] == ["delete", "pause", "create"]
    assert items[0]["actor"] == {"token_id": record["id"], "name": "deployer"}
    assert items[2]["actor"]["name"] == "anonymous"
    assert client.get(f"/v1/jobs/{search}/history", headers=auth).status_code == 403
    unknown = "0190b7c4-0000-7000-8000-000000000000"
    assert client.get(f"/v1/jobs/{unknown}/history", headers=auth).status_code == 404
    assert client.get(f"/v1/jobs/{billing}/history").status_code == 401


def test_pages_follow_the_cursor(client):
    jid = ok(client.post("/v1/jobs", json=job_spec()), 201)["id"]
    for priority in range(1, 6):
        ok(client.patch(f"/v1/jobs/{jid}", json={"priority": priority}))
    seen, cursor = [], None
    while True:
        page = history(client, jid, limit=2, **({"cursor": cursor} if cursor else {}))
        assert len(page["items"]) <= 2
        seen += page["items"]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert [e["job_version"] for e in seen] == [6, 5, 4, 3, 2, 1]
    bad = client.get(f"/v1/jobs/{jid}/history", query_string={"cursor": "nope"})
    assert bad.status_code == 400 and bad.get_json()["error"]["field"] == "cursor"
    bad = client.get(f"/v1/jobs/{jid}/history", query_string={"limit": 0})
    assert bad.status_code == 400 and bad.get_json()["error"]["field"] == "limit"


def test_request_ids_are_made_or_kept(client):
    resp = client.get("/v1/jobs")
    made = resp.headers["X-Request-Id"]
    assert len(made) == 32
    resp = client.get("/v1/jobs", headers={"X-Request-Id": "bad id with spaces"})
    assert resp.headers["X-Request-Id"] != "bad id with spaces"


@pytest.mark.postgres
def test_cli_jobs_history_through_the_api(pg_database_url):
    # The session's database, emptied: a token another test left in it would
    # turn auth on (CRONMAN_AUTH unset: required once a token exists).
    _truncate_pg(pg_database_url)
    with running_api(pg_database_url) as base:
        runner = CliRunner()
        created = runner.invoke(cli, ["jobs", "create", "-f", "-", "--url", base, "-o", "json"],
                                input='{"name": "cli-history", "schedule": {"kind": "interval",'
                                      ' "every": 60}, "target": {"kind": "http", "url": '
                                      f'"https://example.com/h", "headers": {{"X-Key": "{SECRET}"}}}}}}')
        assert created.exit_code == 0, created.output
        import json

        jid = json.loads(created.output)["id"]
        assert runner.invoke(cli, ["jobs", "pause", jid, "--url", base]).exit_code == 0
        table = runner.invoke(cli, ["jobs", "history", jid, "--url", base])
        assert table.exit_code == 0, table.output
        lines = table.output.splitlines()
        assert lines[0].split()[:4] == ["AT", "ACTION", "VERSION", "ACTOR"]
        assert "pause" in lines[1] and "anonymous" in lines[1] and "paused" in lines[1]
        assert "create" in lines[2]
        as_json = runner.invoke(cli, ["jobs", "history", jid, "--url", base, "-o", "json",
                                      "--all"])
        doc = json.loads(as_json.output)
        assert [e["action"] for e in doc["items"]] == ["pause", "create"]
        assert SECRET not in as_json.output
