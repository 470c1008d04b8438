"""Bearer tokens: 401 without, 403 outside the token's namespaces, lists restricted;
the auth state (CRONMAN_AUTH, the bind address, tokens ever created) and revocation."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import time

import pytest

from cronman.config import Settings, is_loopback_bind
from cronman.processes.api import make_app
from cronman.store import tokens as tokens_mod
from tests.conftest import _truncate_pg
from tests.support.api import CRONMAN, http, job_spec, running_api


@pytest.fixture
def client(store, database_url):
    app = make_app(Settings(database_url=database_url), store=store)
    return app.test_client()


def auth(token):
    return {"Authorization": f"Bearer {token}"}


def error_of(resp, status):
    assert resp.status_code == status, (resp.status_code, resp.get_data(as_text=True))
    return resp.get_json()["error"]


def test_open_while_no_token_exists(client):
    assert client.get("/v1/jobs").status_code == 200
    assert client.post("/v1/jobs", json=job_spec()).status_code == 201


@pytest.fixture
def tokens(client, store):
    """Jobs in two namespaces (made while open), then three tokens."""
    ids = {}
    for ns in ("billing", "search"):
        ids[ns] = client.post("/v1/jobs", json=job_spec(f"{ns}-job", namespace=ns)
                              ).get_json()["id"]
    billing, _ = store.tokens.create_token("billing", ["billing"])
    both, _ = store.tokens.create_token("both", ["billing", "search"])
    admin, _ = store.tokens.create_token("admin", None)
    return {"billing": billing, "both": both, "admin": admin, "ids": ids}


def test_401_without_or_with_a_bad_token(client, tokens):
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic abc"},
                    {"Authorization": "Bearer"}, {"Authorization": tokens["billing"]}):
        resp = client.get("/v1/jobs", headers=headers)
        assert error_of(resp, 401)["code"] == "unauthorized"
        assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    for path in ("/v1/cluster", f"/v1/jobs/{tokens['ids']['billing']}", "/v1/runs/x",
                 "/v1/nowhere"):
        error_of(client.get(path), 401)
    error_of(client.post("/v1/jobs", json=job_spec("x")), 401)


def test_open_endpoints_stay_open(client, tokens):
    for path in ("/healthz", "/readyz", "/metrics", "/", "/openapi.json"):
        assert client.get(path).status_code == 200, path


def test_namespaced_token(client, tokens):
    h = auth(tokens["billing"])
    ids = tokens["ids"]
    listed = client.get("/v1/jobs", headers=h).get_json()["items"]
    assert [j["namespace"] for j in listed] == ["billing"]
    assert client.get("/v1/jobs?namespace=billing", headers=h).status_code == 200
    assert error_of(client.get("/v1/jobs?namespace=search", headers=h),
                    403)["field"] == "namespace"
    assert client.get(f"/v1/jobs/{ids['billing']}", headers=h).status_code == 200
    search = ids["search"]
    error_of(client.get(f"/v1/jobs/{search}", headers=h), 403)
    error_of(client.get(f"/v1/jobs/{search}/runs", headers=h), 403)
    error_of(client.get(f"/v1/jobs/{search}/next", headers=h), 403)
    for action in ("pause", "resume", "trigger"):
        error_of(client.post(f"/v1/jobs/{search}/{action}", headers=h), 403)
    error_of(client.patch(f"/v1/jobs/{search}", json={"priority": 1}, headers=h), 403)
    error_of(client.delete(f"/v1/jobs/{search}", headers=h), 403)
    error_of(client.post(f"/v1/jobs/{search}/backfill", headers=h,
                         json={"since": "2026-01-01T00:00:00Z",
                               "until": "2026-01-02T00:00:00Z"}), 403)
    # Creating: only in its namespaces (the default namespace included).
    assert client.post("/v1/jobs", json=job_spec("n", namespace="billing"),
                       headers=h).status_code == 201
    assert error_of(client.post("/v1/jobs", json=job_spec("n", namespace="search"), headers=h),
                    403)["field"] == "namespace"
    error_of(client.post("/v1/jobs", json=job_spec("n"), headers=h), 403)
    # Moving a job out of its namespaces is refused.
    assert error_of(client.patch(f"/v1/jobs/{ids['billing']}", json={"namespace": "search"},
                                 headers=h), 403)["field"] == "namespace"


def test_bulk_checks_every_item(client, tokens, store):
    h = auth(tokens["billing"])
    body = {"jobs": [job_spec("b1", namespace="billing"), job_spec("s1", namespace="search")]}
    assert error_of(client.post("/v1/jobs/bulk", json=body, headers=h),
                    403)["field"] == "jobs[1].namespace"
    names = {j["name"] for j in client.get("/v1/jobs", headers=auth(tokens["admin"])
                                           ).get_json()["items"]}
    assert "b1" not in names
    assert client.post("/v1/jobs/bulk", json=body,
                       headers=auth(tokens["both"])).status_code == 201


def test_runs_of_another_namespace(client, tokens):
    admin = auth(tokens["admin"])
    run = client.post(f"/v1/jobs/{tokens['ids']['search']}/trigger", headers=admin).get_json()
    error_of(client.get(f"/v1/runs/{run['id']}", headers=auth(tokens["billing"])), 403)
    error_of(client.post(f"/v1/runs/{run['id']}/replay", headers=auth(tokens["billing"])), 403)
    assert client.get(f"/v1/runs/{run['id']}", headers=auth(tokens["both"])).status_code == 200


def test_admin_and_multi_namespace_tokens(client, tokens):
    for name in ("admin", "both"):
        items = client.get("/v1/jobs", headers=auth(tokens[name])).get_json()["items"]
        assert sorted(j["namespace"] for j in items) == ["billing", "search"]
    assert client.get("/v1/cluster", headers=auth(tokens["billing"])).status_code == 200


def test_revoked_token_is_refused(client, store, tokens):
    record = store.tokens.find_token(tokens["billing"])
    assert store.tokens.revoke_token(record["id"])
    error_of(client.get("/v1/jobs", headers=auth(tokens["billing"])), 401)
    assert client.get("/v1/jobs", headers=auth(tokens["admin"])).status_code == 200


def test_revoking_every_token_never_opens_the_api(client, store, tokens):
    """Found by probing: once every token was revoked, /v1 answered without one."""
    for record in store.tokens.list_tokens():
        store.tokens.revoke_token(record["id"])
    error_of(client.get("/v1/jobs"), 401)
    error_of(client.post("/v1/jobs", json=job_spec("anonymous")), 401)
    error_of(client.get("/v1/jobs", headers=auth(tokens["admin"])), 401)
    assert client.get("/readyz").get_json()["auth"] == {
        "mode": "required", "reason": "an API token has been created"}


def _app(store, database_url, **settings):
    return make_app(Settings(database_url=database_url, **settings), store=store)


def test_auth_required_without_any_token(store, database_url):
    client = _app(store, database_url, auth="required").test_client()
    error_of(client.get("/v1/jobs"), 401)
    error_of(client.post("/v1/jobs", json=job_spec()), 401)
    assert client.get("/readyz").get_json()["auth"] == {"mode": "required",
                                                         "reason": "CRONMAN_AUTH=required"}
    secret, _ = store.tokens.create_token("ci", ["default"])
    assert client.post("/v1/jobs", json=job_spec(), headers=auth(secret)).status_code == 201


def test_auth_required_by_default_beyond_loopback(store, database_url):
    client = _app(store, database_url, api_bind="0.0.0.0:8080").test_client()
    error_of(client.get("/v1/jobs"), 401)
    state = client.get("/readyz").get_json()["auth"]
    assert state["mode"] == "required" and "0.0.0.0:8080" in state["reason"]
    # Loopback binds (and a Unix socket) leave it to the token table.
    for bind in ("127.0.0.1:8080", "localhost:80", "[::1]:8080", "127.0.0.2:1", "unix:/x"):
        assert is_loopback_bind(bind), bind
    for bind in ("0.0.0.0:8080", ":8080", "[::]:8080", "10.1.2.3:80", "api.internal:80"):
        assert not is_loopback_bind(bind), bind


def test_auth_off_is_explicit_visible_and_still_refuses_revoked_tokens(
        store, database_url, caplog):
    secret, record = store.tokens.create_token("billing", ["billing"])
    with caplog.at_level(logging.WARNING, logger="cronman.api.auth"):
        client = _app(store, database_url, auth="off").test_client()
    assert any("CRONMAN_AUTH=off" in r.getMessage() for r in caplog.records)
    assert client.get("/readyz").get_json()["auth"] == {"mode": "off",
                                                         "reason": "CRONMAN_AUTH=off"}
    assert client.post("/v1/jobs", json=job_spec()).status_code == 201
    # A token that is sent is checked all the same: its namespaces hold...
    error_of(client.post("/v1/jobs", json=job_spec("x"), headers=auth(secret)), 403)
    # ...and a revoked (or unknown) one is refused.
    store.tokens.revoke_token(record["id"])
    error_of(client.get("/v1/jobs", headers=auth(secret)), 401)
    error_of(client.get("/v1/jobs", headers=auth("cm_nope")), 401)


def test_auth_setting_is_validated():
    with pytest.raises(ValueError, match="CRONMAN_AUTH"):
        Settings(auth="maybe")
    assert Settings.from_env(environ={"CRONMAN_AUTH": " Required "}).auth == "required"
    assert Settings.from_env(environ={"CRONMAN_AUTH": ""}).auth is None


@pytest.mark.postgres
def test_revoked_tokens_under_gunicorn(pg_database_url):
    """The finding as it was made: every token revoked with `cronman tokens revoke`
    while `cronman api` runs on PostgreSQL; a revoked admin token and an
    anonymous POST must both get 401."""
    _truncate_pg(pg_database_url)

    def cli(*args: str) -> str:
        env = {**os.environ, "CRONMAN_DATABASE_URL": pg_database_url}
        out = subprocess.run([*CRONMAN, "tokens", *args], capture_output=True, text=True,
                             env=env, timeout=60)
        assert out.returncode == 0, out.stderr
        return out.stdout

    with running_api(pg_database_url, workers=2) as base:
        assert http("POST", base + "/v1/jobs", job_spec("before"))[0] == 201
        secret = json.loads(cli("create", "--admin", "--json"))["token"]
        time.sleep(tokens_mod.CACHE_SECONDS + 0.5)
        assert http("GET", base + "/v1/jobs")[0] == 401
        assert http("GET", base + "/v1/jobs", token=secret)[0] == 200
        for record in json.loads(cli("list", "--json")):
            cli("revoke", record["id"])
        time.sleep(tokens_mod.CACHE_SECONDS + 0.5)
        for _ in range(10):  # whichever worker answers, whatever it cached
            assert http("GET", base + "/v1/jobs", token=secret)[0] == 401
            assert http("POST", base + "/v1/jobs", job_spec("anonymous"))[0] == 401
        ready = http("GET", base + "/readyz")[1]
        assert ready["auth"] == {"mode": "required", "reason": "an API token has been created"}
