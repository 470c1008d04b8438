"""Bearer tokens: 401 without, 403 outside the token's namespaces, lists restricted."""

from __future__ import annotations

import pytest

from cronman.api.app import create_app
from cronman.config import Settings
from tests.support.api import job_spec


@pytest.fixture
def client(store, database_url):
    app = create_app(Settings(database_url=database_url), store=store)
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
