"""/v1/namespaces/{ns}/signing-key: who may read and rotate a namespace's keys, the
overlap window, what is stored (never a key), and the CLI. SQLite and PostgreSQL."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from cronman.cli import cli
from cronman.config import Settings
from cronman.processes.api import make_app
from cronman.signing import namespace_key
from cronman.store.tables import signing_keys
from cronman.timeutil import parse_rfc3339
from tests.support.api import REPO, running_api

SECRET = "api-signing-secret"


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


@pytest.fixture
def app(store, database_url):
    return make_app(Settings(database_url=database_url, signing_secret=SECRET), store=store)


@pytest.fixture
def tokens(store):
    admin, _ = store.tokens.create_token("root", None)
    billing, _ = store.tokens.create_token("billing", ["billing"])
    viewer, _ = store.tokens.create_token("viewer", ["billing"], read_only=True)
    return {"admin": bearer(admin), "billing": bearer(billing), "viewer": bearer(viewer)}


def test_a_namespace_token_reads_its_own_key_and_no_other(app, tokens):
    client = app.test_client()
    resp = client.get("/v1/namespaces/billing/signing-key", headers=tokens["billing"])
    assert resp.status_code == 200 and resp.headers["Cache-Control"] == "no-store"
    body = resp.get_json()
    assert body == {"namespace": "billing", "generation": 0, "rotated_at": None,
                    "keys": [{"generation": 0, "key": namespace_key(SECRET, "billing"),
                              "signs_until": None}]}
    for path, who in (("/v1/namespaces/search/signing-key", "billing"),
                      ("/v1/namespaces/search/signing-key/rotate", "billing"),
                      ("/v1/namespaces/billing/signing-key", "viewer")):
        call = client.post if path.endswith("rotate") else client.get
        resp = call(path, headers=tokens[who], json={} if call is client.post else None)
        assert resp.status_code == 403, (path, who, resp.get_json())
    assert client.get("/v1/namespaces/billing/signing-key").status_code == 401
    bad = client.get("/v1/namespaces/-bad/signing-key", headers=tokens["admin"])
    assert bad.status_code == 400 and bad.get_json()["error"]["field"] == "namespace"


def test_rotation_overlap_and_what_is_stored(app, store, tokens):
    client = app.test_client()
    path = "/v1/namespaces/billing/signing-key/rotate"
    bad = client.post(path, json={"overlap": -1}, headers=tokens["billing"])
    assert bad.status_code == 400 and bad.get_json()["error"]["field"] == "overlap"
    bad = client.post(path, json={"later": 1}, headers=tokens["billing"])
    assert bad.status_code == 400 and bad.get_json()["error"]["field"] == "later"
    first = client.post(path, json={"overlap": 600}, headers=tokens["billing"]).get_json()
    assert first["generation"] == 1
    new, previous = first["keys"]
    assert new == {"generation": 1, "key": namespace_key(SECRET, "billing", 1),
                   "signs_until": None}
    assert previous["key"] == namespace_key(SECRET, "billing", 0)
    assert parse_rfc3339(previous["signs_until"]) - parse_rfc3339(first["rotated_at"]) \
        == timedelta(seconds=600)
    # A leaked key: overlap 0 retires the previous one at once.
    second = client.post(path, json={"overlap": 0}, headers=tokens["admin"]).get_json()
    assert second["generation"] == 2 and [k["generation"] for k in second["keys"]] == [2]
    # An empty body takes the default window (a day).
    third = client.post(path, headers=tokens["admin"]).get_json()
    assert [k["generation"] for k in third["keys"]] == [3, 2]
    # Only generations are stored: no key, no secret.
    with store.db.read() as conn:
        rows = [dict(r._mapping) for r in conn.execute(select(signing_keys)).all()]
    assert [(r["namespace"], r["generation"]) for r in rows] == [("billing", 3)]
    assert not any(SECRET in str(v) or namespace_key(SECRET, "billing", 3) in str(v)
                   for r in rows for v in r.values())


def test_a_rotation_inside_the_window_drops_the_older_key_and_the_docs_say_what_happens(
        app, tokens):
    """Nodes take a rotation on their next poll (signing with the old key alone until
    then), and a second rotation inside the window drops the older previous key:
    docs/security.md, the CLI's help and the OpenAPI description say both, not "signs at
    once" (the README's short section points there)."""
    client = app.test_client()
    path = "/v1/namespaces/billing/signing-key/rotate"
    first = client.post(path, json={"overlap": 600}, headers=tokens["billing"]).get_json()
    assert [k["generation"] for k in first["keys"]] == [1, 0]
    second = client.post(path, json={"overlap": 600}, headers=tokens["billing"]).get_json()
    assert [k["generation"] for k in second["keys"]] == [2, 1]  # generation 0: gone at once
    assert namespace_key(SECRET, "billing", 0) not in json.dumps(second)
    assert parse_rfc3339(second["keys"][1]["signs_until"]) \
        - parse_rfc3339(second["rotated_at"]) == timedelta(seconds=600)

    doc = client.get("/openapi.json").get_json()
    described = doc["paths"]["/v1/namespaces/{namespace}/signing-key/rotate"]["post"]
    help_text = CliRunner().invoke(cli, ["signing-key", "rotate", "--help"]).output
    # The README's section is the short form; docs/security.md holds the rotation in full.
    readme = (REPO / "README.md").read_text()
    short = readme.split("### Callback signatures", 1)[1].split("\n### ", 1)[0]
    security = (REPO / "docs" / "security.md").read_text()
    section = security.split("## Callback signatures", 1)[1].split("\n## ", 1)[0]
    for text in (described["description"], " ".join(help_text.split()), section):
        flat = " ".join(text.split())
        assert "next poll" in flat and "drops the older previous key" in flat, text
    assert "next poll" in " ".join(short.split()) and "docs/security.md" in short
    assert "signs at once" not in section and "signs at once" not in short


def test_unsigned_deployments_answer_409(store, database_url, tokens):
    client = make_app(Settings(database_url=database_url), store=store).test_client()
    resp = client.get("/v1/namespaces/billing/signing-key", headers=tokens["admin"])
    assert resp.status_code == 409 and "CRONMAN_SIGNING_SECRET" in resp.get_json()["error"][
        "message"]


def test_the_cli_shows_and_rotates(store, database_url, tokens):
    with running_api(database_url, extra_env={"CRONMAN_SIGNING_SECRET": SECRET}) as url:
        token = tokens["billing"]["Authorization"].split()[1]
        env = {"CRONMAN_URL": url, "CRONMAN_TOKEN": token}
        runner = CliRunner()
        shown = runner.invoke(cli, ["signing-key", "show", "billing"], env=env)
        assert shown.exit_code == 0, shown.output
        assert namespace_key(SECRET, "billing") in shown.output and "current" in shown.output
        rotated = runner.invoke(cli, ["signing-key", "rotate", "billing", "--overlap", "60",
                                      "-o", "json"], env=env)
        assert rotated.exit_code == 0, rotated.output
        assert [k["generation"] for k in json.loads(rotated.output)["keys"]] == [1, 0]
