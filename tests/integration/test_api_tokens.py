"""API tokens through the API (/v1/tokens): admin tokens only, in every auth state;
create, list (cursor pages), revoke (refused by every API process once the answer
comes); each change in the token history. On SQLite and PostgreSQL in process, and
against `cronman api` under gunicorn with two workers on PostgreSQL."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import select

from cronman.config import Settings
from cronman.processes.api import make_app
from cronman.store.tables import token_history
from cronman.store.tokens import CACHE_SECONDS
from tests.support.api import http, job_spec, running_api
from tests.support.databases import migrated_pg_database


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def error_of(resp, status):
    assert resp.status_code == status, (resp.status_code, resp.get_data(as_text=True))
    return resp.get_json()["error"]


@pytest.fixture
def app(store, database_url):
    return make_app(Settings(database_url=database_url), store=store)


@pytest.fixture
def admin(store):
    secret, record = store.tokens.create_token("root", None)
    return secret, record


def test_create_list_revoke(app, store, admin):
    client, root = app.test_client(), bearer(admin[0])
    resp = client.post("/v1/tokens", json={"namespaces": ["billing", "ops", "billing"],
                                           "name": "billing-ci"}, headers=root)
    assert resp.status_code == 201, resp.get_json()
    made = resp.get_json()
    assert made["token"].startswith("cm_") and made["name"] == "billing-ci"
    assert made["namespaces"] == ["billing", "ops"] and made["admin"] is False
    assert made["read_only"] is False and made["revoked_at"] is None

    # The new token works within its namespaces, and only there.
    own = bearer(made["token"])
    assert client.post("/v1/jobs", json=job_spec("a", namespace="ops"),
                       headers=own).status_code == 201
    error_of(client.post("/v1/jobs", json=job_spec("a", namespace="search"), headers=own), 403)

    second = client.post("/v1/tokens", json={"admin": True, "read_only": True},
                         headers=root).get_json()
    assert second["name"] == "admin" and second["namespaces"] is None
    assert second["admin"] is True and second["read_only"] is True
    third = client.post("/v1/tokens", json={"namespaces": ["a", "b"], "admin": False},
                        headers=root).get_json()
    assert third["name"] == "a,b"

    listed = client.get("/v1/tokens", headers=root).get_json()
    assert [t["id"] for t in listed["items"]] == [admin[1]["id"], made["id"], second["id"],
                                                  third["id"]]
    assert listed["next_cursor"] is None
    text = client.get("/v1/tokens", headers=root).get_data(as_text=True)
    for secret in (admin[0], made["token"], second["token"], third["token"]):
        assert secret not in text
    assert "hash" not in text

    # Cursor pages, oldest first.
    seen, cursor = [], None
    while True:
        query = "?limit=3" + (f"&cursor={cursor}" if cursor else "")
        page = client.get("/v1/tokens" + query, headers=root).get_json()
        seen += [t["id"] for t in page["items"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert seen == [t["id"] for t in listed["items"]]

    assert client.delete(f"/v1/tokens/{made['id']}", headers=root).status_code == 204
    error_of(client.get("/v1/jobs", headers=own), 401)
    revoked = [t for t in client.get("/v1/tokens", headers=root).get_json()["items"]
               if t["id"] == made["id"]]
    assert revoked[0]["revoked_at"] is not None
    # Again: no error, nothing more recorded.
    assert client.delete(f"/v1/tokens/{made['id']}", headers=root).status_code == 204
    error_of(client.delete("/v1/tokens/0000aaaa-0000-0000-0000-000000000000", headers=root),
             404)
    actions = [(h["action"], h["actor_token_id"]) for h in store.tokens.token_history(
        made["id"])]
    assert actions == [("create", admin[1]["id"]), ("revoke", admin[1]["id"])]


def test_only_admin_tokens_manage_tokens(app, store, admin):
    client = app.test_client()
    billing, _ = store.tokens.create_token("billing", ["billing"])
    reader, _ = store.tokens.create_token("reader", None, read_only=True)
    target = store.tokens.create_token("target", ["x"])[1]["id"]
    calls = (("get", "/v1/tokens", None), ("post", "/v1/tokens", {"namespaces": ["x"]}),
             ("delete", f"/v1/tokens/{target}", None))
    for method, path, body in calls:
        call = getattr(client, method)
        error = error_of(call(path, json=body, headers=bearer(billing)), 403)
        assert "admin token" in error["message"]
        error_of(call(path, json=body), 401)
        error_of(call(path, json=body, headers=bearer("cm_unknown")), 401)
    # A read-only admin token reads, never writes.
    assert client.get("/v1/tokens", headers=bearer(reader)).status_code == 200
    error_of(client.post("/v1/tokens", json={"namespaces": ["x"]}, headers=bearer(reader)), 403)
    error_of(client.delete(f"/v1/tokens/{target}", headers=bearer(reader)), 403)
    assert store.tokens.get_token(target)["revoked_at"] is None


@pytest.mark.parametrize("auth", [None, "off"])
def test_no_token_no_token_management_in_any_auth_state(store, database_url, auth):
    """Open (no token yet, loopback) and CRONMAN_AUTH=off let anonymous calls through,
    but never to /v1/tokens: the first admin token comes from the database side."""
    client = make_app(Settings(database_url=database_url, auth=auth),
                        store=store).test_client()
    assert client.get("/v1/jobs").status_code == 200
    for resp in (client.get("/v1/tokens"), client.post("/v1/tokens", json={"admin": True})):
        error = error_of(resp, 401)
        assert "cronman tokens create --admin" in error["message"]
        assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    assert store.tokens.list_tokens() == []
    if auth == "off":  # a token that is sent is checked, and an admin one may manage
        secret, _ = store.tokens.create_token("root", None)
        made = client.post("/v1/tokens", json={"namespaces": ["a"]}, headers=bearer(secret))
        assert made.status_code == 201
        assert client.get("/readyz").get_json()["auth"]["mode"] == "off"


def test_bad_requests_name_the_field(app, admin):
    client, root = app.test_client(), bearer(admin[0])
    for body, field in (({}, "namespaces"), ({"admin": False}, "namespaces"),
                        ({"namespaces": []}, "namespaces"),
                        ({"namespaces": "billing"}, "namespaces"),
                        ({"admin": True, "namespaces": ["a"]}, "namespaces"),
                        ({"namespaces": ["ok", "bad ns"]}, "namespaces[1]"),
                        ({"namespaces": ["a"] * 101}, "namespaces"),
                        ({"admin": "yes"}, "admin"), ({"admin": None}, "admin"),
                        ({"admin": True, "read_only": 1}, "read_only"),
                        ({"admin": True, "name": ""}, "name"),
                        ({"admin": True, "name": "x" * 129}, "name"),
                        ({"admin": True, "secret": "x"}, "secret"), ([], None)):
        assert error_of(client.post("/v1/tokens", json=body, headers=root),
                        400)["field"] == field, body
    for query, field in (("limit=0", "limit"), ("cursor=zz", "cursor"), ("x=1", "x")):
        assert error_of(client.get(f"/v1/tokens?{query}", headers=root),
                        400)["field"] == field, query


def test_changes_are_recorded_with_actor_and_request(app, store, admin):
    client = app.test_client()
    headers = {**bearer(admin[0]), "X-Request-Id": "req-create-1"}
    made = client.post("/v1/tokens", json={"namespaces": ["a"], "read_only": True},
                       headers=headers).get_json()
    client.delete(f"/v1/tokens/{made['id']}",
                  headers={**bearer(admin[0]), "X-Request-Id": "req-revoke-1"})
    rows = store.tokens.token_history(made["id"])
    assert [(r["action"], r["request_id"], r["actor_token_id"], r["actor_name"],
             r["namespaces"], r["read_only"], r["token_name"]) for r in rows] == [
        ("create", "req-create-1", admin[1]["id"], "root", ["a"], True, "a"),
        ("revoke", "req-revoke-1", admin[1]["id"], "root", ["a"], True, "a")]
    # The bootstrap token was made with database access.
    first = store.tokens.token_history(admin[1]["id"])
    assert [(r["action"], r["actor_token_id"], r["actor_name"]) for r in first] == [
        ("create", None, "database")]
    with store.engine.connect() as conn:
        every = [dict(r._mapping) for r in conn.execute(select(token_history))]
    assert made["token"] not in repr(every) and admin[0] not in repr(every)


@pytest.mark.postgres
@pytest.mark.slow
def test_revoked_through_the_api_is_refused_at_once_by_every_worker():
    """gunicorn with two workers on PostgreSQL: each caches the tokens it checked; the
    DELETE answers once neither can accept the revoked token any more."""
    with migrated_pg_database() as url:
        from cronman.store import open_store

        store = open_store(url)
        try:
            root, _ = store.tokens.create_token("root", None)
        finally:
            store.close()
        with running_api(url, workers=2) as base:
            status, made, _ = http("POST", base + "/v1/tokens", {"admin": True}, token=root)
            assert status == 201, made
            for _ in range(20):  # both workers check it, and cache it
                assert http("GET", base + "/v1/jobs", token=made["token"])[0] == 200
            started = time.monotonic()
            status, _, _ = http("DELETE", f"{base}/v1/tokens/{made['id']}", token=root)
            took = time.monotonic() - started
            assert status == 204 and took >= CACHE_SECONDS
            for _ in range(20):  # whichever worker answers
                assert http("GET", base + "/v1/jobs", token=made["token"])[0] == 401
            # A revoked token may not revoke or make others, of course.
            assert http("POST", base + "/v1/tokens", {"admin": True},
                        token=made["token"])[0] == 401
            started = time.monotonic()
            assert http("DELETE", f"{base}/v1/tokens/{made['id']}", token=root)[0] == 204
            assert time.monotonic() - started < CACHE_SECONDS  # settled already
            status, listed, _ = http("GET", base + "/v1/tokens", token=root)
            assert status == 200 and [t["revoked_at"] is not None
                                      for t in listed["items"]] == [False, True]
