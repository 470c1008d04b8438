"""What a namespace token's container job may ask of its host: refused at
validation beyond the namespace's grant (403 naming the field), granted by an
admin token through ``/v1/namespaces/{namespace}/host-policy``."""

from __future__ import annotations

import pytest

from cronman.config import Settings
from cronman.processes.api import make_app
from tests.support.api import job_spec


def auth(token):
    return {"Authorization": f"Bearer {token}"}


def error_of(resp, status):
    assert resp.status_code == status, (resp.status_code, resp.get_data(as_text=True))
    return resp.get_json()["error"]


def container(name="task", **target):
    return job_spec(name, namespace="beta", target={
        "kind": "container", "image": "busybox", "command": ["id"], **target})


@pytest.fixture
def app(store, database_url):
    return make_app(Settings(database_url=database_url, auth="required"), store=store)


@pytest.fixture
def client(app):
    return app.test_client()


@pytest.fixture
def tokens(store):
    beta, _ = store.tokens.create_token("beta", ["beta"])
    admin, _ = store.tokens.create_token("admin", None)
    return {"beta": auth(beta), "admin": auth(admin)}


def test_a_namespace_token_is_refused_root_and_the_host_network(client, tokens):
    h = tokens["beta"]
    for target, field in (({"user": "root"}, "target.user"), ({"user": "0"}, "target.user"),
                          ({"user": "1000:0"}, "target.user"),
                          ({"network": "host"}, "target.network")):
        err = error_of(client.post("/v1/jobs", json=container(**target), headers=h), 403)
        assert err["field"] == field and "host policy" in err["message"], err
    err = error_of(client.post("/v1/jobs/bulk", json={"jobs": [
        container("a"), container("b", network="host")]}, headers=h), 403)
    assert err["field"] == "jobs[1].target.network"
    # Within the default: non-root, no network.
    resp = client.post("/v1/jobs", json=container(user="1000"), headers=h)
    assert resp.status_code == 201, resp.get_json()
    job = resp.get_json()
    assert job["target"]["user"] == "1000" and job["target"]["network"] == "none"
    # A PATCH cannot ask for more either.
    err = error_of(client.patch(f"/v1/jobs/{job['id']}", json={"target": {
        **job["target"], "user": "root"}}, headers=h), 403)
    assert err["field"] == "target.user"
    assert client.get("/v1/namespaces/beta/host-policy", headers=h).get_json() == {
        "namespace": "beta", "root": False, "networks": ["none"], "process": False,
        "default": True, "granted": {}}


def test_an_admin_grant_lets_the_namespace_ask(client, tokens, store):
    h, admin = tokens["beta"], tokens["admin"]
    # Only an admin token grants.
    error_of(client.put("/v1/namespaces/beta/host-policy", json={"root": True}, headers=h), 403)
    error_of(client.put("/v1/namespaces/beta/host-policy", json={"root": True}), 401)
    err = error_of(client.put("/v1/namespaces/beta/host-policy",
                              json={"networks": ["bridge"]}, headers=admin), 400)
    assert err["field"] == "networks[0]"
    err = error_of(client.put("/v1/namespaces/beta/host-policy", json={"mounts": []},
                              headers=admin), 400)
    assert err["field"] == "mounts"
    resp = client.put("/v1/namespaces/beta/host-policy",
                      json={"root": True, "networks": ["none", "host"]}, headers=admin)
    assert resp.status_code == 200 and resp.get_json() == {
        "namespace": "beta", "root": True, "networks": ["host", "none"], "process": False,
        "default": False, "granted": {"root": True, "networks": ["host", "none"]}}
    assert client.post("/v1/jobs", json=container(user="root", network="host"),
                       headers=h).status_code == 201
    # Another namespace's token gains nothing from it.
    other, _ = store.tokens.create_token("gamma", ["gamma"])
    err = error_of(client.post("/v1/jobs", json={**container(user="root"), "namespace": "gamma"},
                               headers=auth(other)), 403)
    assert err["field"] == "target.user"
    # Dropped: the default applies again.
    assert client.delete("/v1/namespaces/beta/host-policy", headers=admin).status_code == 204
    err = error_of(client.post("/v1/jobs", json=container("again", network="host"),
                               headers=h), 403)
    assert err["field"] == "target.network"


def test_admin_tokens_and_the_operator_default(store, database_url, tokens):
    # An admin token is the operator: it may ask for anything.
    client = make_app(Settings(database_url=database_url, auth="required"),
                      store=store).test_client()
    assert client.post("/v1/jobs", json=container(user="root", network="host"),
                       headers=tokens["admin"]).status_code == 201
    # CRONMAN_HOST_POLICY sets every namespace's default grant.
    lax = make_app(Settings(database_url=database_url, auth="required",
                            host_policy='{"networks": ["none", "host"]}'),
                   store=store).test_client()
    assert lax.post("/v1/jobs", json=container("net", network="host"),
                    headers=tokens["beta"]).status_code == 201
    assert error_of(lax.post("/v1/jobs", json=container("root", user="root"),
                             headers=tokens["beta"]), 403)["field"] == "target.user"
    with pytest.raises(ValueError, match="CRONMAN_HOST_POLICY"):
        Settings(host_policy='{"root": "yes"}')


def test_a_grant_stores_only_its_keys_so_a_narrower_default_reaches_the_rest(
        store, database_url, tokens):
    lax = make_app(Settings(database_url=database_url, auth="required",
                            host_policy='{"networks": ["none", "host"]}'),
                   store=store).test_client()
    resp = lax.put("/v1/namespaces/beta/host-policy", json={"root": True},
                   headers=tokens["admin"])
    assert resp.status_code == 200 and resp.get_json() == {
        "namespace": "beta", "root": True, "networks": ["host", "none"], "process": False,
        "default": False, "granted": {"root": True}}, resp.get_json()
    assert store.host_policies.get("beta") == {"root": True}
    assert lax.post("/v1/jobs", json=container("net", network="host"),
                    headers=tokens["beta"]).status_code == 201
    # The operator narrows CRONMAN_HOST_POLICY: the key the grant left out follows.
    narrow = make_app(Settings(database_url=database_url, auth="required"),
                      store=store).test_client()
    assert narrow.get("/v1/namespaces/beta/host-policy", headers=tokens["beta"]).get_json() == {
        "namespace": "beta", "root": True, "networks": ["none"], "process": False,
        "default": False, "granted": {"root": True}}
    err = error_of(narrow.post("/v1/jobs", json=container("net2", network="host"),
                               headers=tokens["beta"]), 403)
    assert err["field"] == "target.network"
    assert narrow.post("/v1/jobs", json=container("root", user="root"),
                       headers=tokens["beta"]).status_code == 201
    # A PUT replaces the grant: keys it leaves out are no longer granted.
    narrow.put("/v1/namespaces/beta/host-policy", json={"process": False},
               headers=tokens["admin"])
    assert store.host_policies.get("beta") == {"process": False}
    assert error_of(narrow.post("/v1/jobs", json=container("root2", user="root"),
                                headers=tokens["beta"]), 403)["field"] == "target.user"
