"""`cronman tokens` end to end against `cronman api` on PostgreSQL: the first admin
token made in the database, every later one made, listed and revoked through the API
(`cronman tokens api ...`), and the client calls under them."""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

from cronman.cli import cli
from cronman.cli.group import RET_ERROR, RET_UNAVAILABLE, RET_USAGE
from cronman.client import CronmanClient, PermissionDenied, Unauthenticated
from cronman.store import open_store
from tests.support.api import free_port, job_spec, running_api
from tests.support.databases import migrated_pg_database

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture(scope="module")
def server():
    with migrated_pg_database() as url:
        with running_api(url) as base:
            yield {"url": url, "base": base}


@pytest.fixture(scope="module")
def cronman(server):
    runner = CliRunner()

    def invoke(*args, token=None, input=None):
        env = {"CRONMAN_DATABASE_URL": server["url"], "CRONMAN_URL": server["base"],
               "CRONMAN_TOKEN": token}
        return runner.invoke(cli, list(args), env=env, input=input, catch_exceptions=False)

    return invoke


@pytest.fixture(scope="module")
def root(cronman):
    """The first admin token: made in the database (the API takes none without one)."""
    res = cronman("tokens", "create", "--admin", "--name", "root", "--json")
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_help_says_which_commands_go_through_the_api(cronman):
    text = cronman("tokens", "--help").stdout
    assert "cronman tokens api create|list|revoke" in text
    assert "cronman tokens create --admin" in text
    for line in ("create  [database]", "list    [database]", "revoke  [database]"):
        assert line in text
    assert "--url" in cronman("tokens", "api", "list", "--help").stdout
    assert "--database-url" in cronman("tokens", "list", "--help").stdout


def test_create_list_revoke_through_the_api(server, cronman, root):
    admin = root["token"]
    res = cronman("tokens", "api", "create", "--namespace", "billing", "--name", "ci",
                  token=admin)
    assert res.exit_code == 0, res.output
    head, secret = res.stdout.splitlines()
    assert head.startswith("token ") and "(ci; billing)" in head
    assert secret.startswith("cm_") and "cannot be shown again" in res.stderr
    ci_id = head.split()[1]

    res = cronman("tokens", "api", "create", "--admin", "--read-only", "-o", "json",
                  token=admin)
    assert res.exit_code == 0, res.output
    reader = json.loads(res.stdout)
    assert reader["admin"] and reader["read_only"] and reader["token"].startswith("cm_")

    listed = cronman("tokens", "api", "list", token=admin)
    assert listed.exit_code == 0, listed.output
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["ID", "NAME", "NAMESPACES", "ACCESS", "CREATED", "REVOKED"]
    assert [line.split()[1] for line in lines[1:]] == ["root", "ci", "admin"]
    assert "read-only" in lines[3] and "(all)" in lines[1]
    for text in (secret, reader["token"], admin):
        assert text not in listed.stdout
    as_yaml = yaml.safe_load(cronman("tokens", "api", "list", "-o", "yaml",
                                     token=admin).stdout)
    assert [t["name"] for t in as_yaml["items"]] == ["root", "ci", "admin"]
    first = cronman("tokens", "api", "list", "--limit", "2", token=admin)
    assert len(first.stdout.splitlines()) == 3 and "--cursor " in first.stderr
    cursor = first.stderr.split("--cursor ")[1].split()[0]
    rest = cronman("tokens", "api", "list", "--limit", "2", "--cursor", cursor, "-o", "json",
                   token=admin)
    assert [t["name"] for t in json.loads(rest.stdout)["items"]] == ["admin"]

    # The new token works in its namespace; the read-only admin token reads only.
    job = server["base"]
    with CronmanClient(job, secret) as ci:
        ci.create_job(job_spec("nightly", namespace="billing"))
        with pytest.raises(PermissionDenied):
            ci.create_job(job_spec("nightly", namespace="search"))
    res = cronman("tokens", "api", "create", "--namespace", "x", token=reader["token"])
    assert res.exit_code == RET_ERROR and "HTTP 403" in res.stderr and "read-only" in res.stderr

    res = cronman("tokens", "api", "revoke", ci_id, token=admin)
    assert res.exit_code == 0 and res.stdout.strip() == f"revoked {ci_id}"
    res = cronman("jobs", "list", token=secret)  # at once
    assert res.exit_code == RET_ERROR and "HTTP 401" in res.stderr
    res = cronman("tokens", "api", "revoke", ci_id, reader["id"], "-o", "json", token=admin)
    assert json.loads(res.stdout) == {"revoked": [ci_id, reader["id"]]}
    revoked = {t["name"]: t["revoked_at"] for t in json.loads(cronman(
        "tokens", "list", "--json").stdout)}  # the database side sees the same
    assert revoked["ci"] and revoked["admin"] and revoked["root"] is None


def test_errors_name_the_field_and_exit_non_zero(server, cronman, root):
    admin = root["token"]
    assert cronman("tokens", "api", "create", token=admin).exit_code == RET_USAGE
    res = cronman("tokens", "api", "create", "--admin", "--namespace", "a", token=admin)
    assert res.exit_code == RET_USAGE
    res = cronman("tokens", "api", "create", "--namespace", "bad ns", token=admin)
    assert res.exit_code == RET_ERROR and "HTTP 400" in res.stderr
    assert "(namespaces[0])" in res.stderr
    res = cronman("tokens", "api", "revoke", "0000aaaa-0000-0000-0000-000000000000",
                  token=admin)
    assert res.exit_code == RET_ERROR and "HTTP 404" in res.stderr
    res = cronman("tokens", "api", "list")
    assert res.exit_code == RET_ERROR and "HTTP 401" in res.stderr
    made = json.loads(cronman("tokens", "api", "create", "--namespace", "billing", "-o",
                              "json", token=admin).stdout)
    res = cronman("tokens", "api", "list", token=made["token"])
    assert res.exit_code == RET_ERROR and "HTTP 403" in res.stderr
    with CronmanClient(server["base"], "cm_wrong") as wrong, pytest.raises(Unauthenticated):
        wrong.list_tokens()
    res = CliRunner().invoke(cli, ["tokens", "api", "list", "--url",
                                   f"http://127.0.0.1:{free_port()}", "--token", admin],
                             catch_exceptions=False)
    assert res.exit_code == RET_UNAVAILABLE


def test_every_change_is_in_the_token_history(server, cronman, root):
    admin = root["token"]
    made = json.loads(cronman("tokens", "api", "create", "--namespace", "audit", "-o", "json",
                              token=admin).stdout)
    assert cronman("tokens", "revoke", made["id"]).exit_code == 0  # the database side
    store = open_store(server["url"])
    try:
        rows = store.tokens.token_history(made["id"])
        bootstrap = store.tokens.token_history(root["id"])
    finally:
        store.close()
    assert [(r["action"], r["actor_token_id"]) for r in rows] == [
        ("create", root["id"]), ("revoke", None)]
    assert rows[0]["actor_name"] == "root" and rows[0]["request_id"]
    assert rows[1]["actor_name"].startswith("database:") and "@" in rows[1]["actor_name"]
    assert bootstrap[0]["action"] == "create"
    assert bootstrap[0]["actor_name"].startswith("database:")
