"""`cronman limits`, `cronman quotas` and `cronman forecast` against a live
`cronman api` (auth required: an admin token and a namespace token)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from cronman.cli import cli
from cronman.cli.group import RET_ERROR
from cronman.store import open_store
from cronman.store.migrate import upgrade
from tests.support.api import job_spec, running_api

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('cli-limits') / 'cronman.db'}"
    upgrade(url)
    store = open_store(url)
    admin, _ = store.tokens.create_token("admin", None)
    pay, _ = store.tokens.create_token("pay", ["pay"])
    store.close()
    with running_api(url, workers=1, extra_env={"CRONMAN_AUTH": "required"}) as base:
        yield base, admin, pay


@pytest.fixture
def run(server):
    base, admin, _ = server
    runner = CliRunner()

    def invoke(*args, token=admin, input=None):
        return runner.invoke(cli, list(args), env={"CRONMAN_URL": base, "CRONMAN_TOKEN": token},
                             input=input, catch_exceptions=False)

    return invoke


def test_limits_create_list_replace_delete(run, tmp_path, server):
    path = tmp_path / "limits.yaml"
    path.write_text("name: billing\nmatch: {host: billing.internal}\nrate: 200\n"
                    "concurrency: 50\n---\nname: pay-team\nmatch: {label: 'team:pay'}\n"
                    "concurrency: 5\n")
    res = run("limits", "create", "-f", str(path))
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines()[0].split() == ["NAME", "MATCH", "ALLOWS", "VERSION"]
    res = run("limits", "list")
    lines = res.stdout.splitlines()
    assert "billing" in lines[1] and "host=billing.internal" in lines[1]
    assert "200/s, 50 at once" in lines[1]
    assert "pay-team" in lines[2] and "label=team:pay" in lines[2]
    res = run("limits", "create", "-f", str(path))
    assert res.exit_code == RET_ERROR and "already exists" in res.output
    path.write_text(json.dumps({"name": "billing", "match": {"host": "billing.internal"},
                                "rate": 100}))
    res = run("limits", "create", "--replace", "-f", str(path), "-o", "json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["items"][0] == {
        "name": "billing", "match": {"host": "billing.internal"}, "rate": 100.0, "version": 2}
    res = run("limits", "list", token=server[2])
    assert res.exit_code == RET_ERROR and "admin token" in res.output
    assert run("limits", "delete", "billing", "pay-team").exit_code == 0
    assert json.loads(run("limits", "list", "-o", "json").stdout) == {"items": []}


def test_quotas_and_the_forecast(run, server, tmp_path):
    res = run("quotas", "set", "pay", "--max-jobs", "1", "--concurrent-runs", "3")
    assert res.exit_code == 0, res.output
    assert "pay" in res.stdout and "3" in res.stdout
    shown = json.loads(run("quotas", "show", "pay", "-o", "json", token=server[2]).stdout)
    assert shown["max_jobs"] == 1 and shown["concurrent_runs"] == 3
    spec = job_spec("hourly", namespace="pay", schedule={"kind": "cron", "cron": "0 * * * *",
                                                         "timezone": "UTC"})
    job = tmp_path / "job.json"
    job.write_text(json.dumps(spec))
    assert run("jobs", "create", "-f", str(job), token=server[2]).exit_code == 0
    job.write_text(json.dumps({**spec, "name": "second"}))
    res = run("jobs", "create", "-f", str(job), token=server[2])
    assert res.exit_code == RET_ERROR and "max_jobs" in res.output, res.output
    res = run("forecast", "--to", "+2h", "--top", "3")
    assert res.exit_code == 0, res.output
    assert "fires of 1 jobs" in res.stdout and "hooks.example.com" in res.stdout
    body = json.loads(run("forecast", "--from", "now", "--to", "+2h", "-o", "json").stdout)
    assert body["fires"] == 2 and body["peak"]["fires"] == 1
    assert run("quotas", "delete", "pay").exit_code == 0
