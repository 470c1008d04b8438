"""Limits in `cronman jobs apply` (created, updated, pruned like jobs) and the
herd forecast of a dry run (``POST /v1/forecast`` with the plan as its
proposal), against a live `cronman api` with auth required."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from cronman.cli import cli
from cronman.cli.group import RET_ERROR
from cronman.client import CronmanClient
from cronman.store import open_store
from cronman.store.migrate import upgrade
from tests.support.api import http, job_spec, running_api

pytestmark = pytest.mark.slow

EVERY_MINUTE = {"kind": "cron", "cron": "* * * * *", "timezone": "UTC"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('apply-limits') / 'cronman.db'}"
    upgrade(url)
    store = open_store(url)
    tokens = {"admin": store.tokens.create_token("admin", None)[0],
              "viewer": store.tokens.create_token("viewer", None, read_only=True)[0],
              "pay": store.tokens.create_token("pay", ["pay"])[0]}
    store.close()
    with running_api(url, workers=1, extra_env={"CRONMAN_AUTH": "required"}) as base:
        yield base, tokens


@pytest.fixture
def admin(server):
    base, tokens = server
    with CronmanClient(base, token=tokens["admin"]) as c:
        for item in c.list_limits():
            c.delete_limit(item["name"])
        for job in list(c.iter_jobs()):
            c.delete_job(job["id"])
        yield c


@pytest.fixture
def run(server):
    base, tokens = server
    runner = CliRunner()

    def invoke(*args, token="admin"):
        return runner.invoke(cli, [str(a) for a in args],
                             env={"CRONMAN_URL": base, "CRONMAN_TOKEN": tokens[token]},
                             catch_exceptions=False)

    return invoke


def write(folder: Path, name: str, doc: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def billing(**overrides) -> dict:
    return {"name": "billing", "match": {"host": "Billing.Internal"}, "rate": 10,
            "concurrency": 5, **overrides}


def herd(folder: Path, count: int, namespace: str = "pay") -> None:
    for i in range(count):
        write(folder, f"charge-{i}", job_spec(
            f"charge-{i}", namespace=namespace, schedule=EVERY_MINUTE,
            target={"kind": "http", "url": "https://billing.internal/charge"}))


def test_apply_creates_updates_and_prunes_limits_like_jobs(run, admin, tmp_path):
    files = tmp_path / "defs"
    write(files, "billing", billing())
    write(files, "pay-team", {"name": "pay-team", "match": {"label": "team:pay"},
                              "concurrency": 3})
    herd(files, 2)
    admin.create_limit({"name": "by-hand", "match": {"namespace": "ops"}, "rate": 1})
    res = run("jobs", "apply", "-f", files, "--dry-run", "--no-forecast")
    assert res.exit_code == 0, res.output
    assert "+ create limit billing" in res.output and "+ create limit pay-team" in res.output
    assert "limits: 2 to create, 0 to update, 0 to delete, 0 unchanged" in res.output
    assert [i["name"] for i in admin.list_limits()] == ["by-hand"]  # a dry run changes nothing

    res = run("jobs", "apply", "-f", files)
    assert res.exit_code == 0, res.output
    assert "created limit billing" in res.output and "limits: 2 created" in res.output
    got = admin.get_limit("billing")
    assert (got["match"], got["rate"], got["managed_by"]) == (
        {"host": "billing.internal"}, 10.0, "apply")
    # The same files again: nothing to do (the host's case is the API's).
    res = run("jobs", "apply", "-f", files, "--dry-run", "--no-forecast")
    assert "limits: 0 to create, 0 to update, 0 to delete, 2 unchanged" in res.output, res.output
    assert "dry run: no changes" in res.output

    write(files, "billing", billing(rate=20))
    res = run("jobs", "apply", "-f", files, "-o", "json")
    assert res.exit_code == 0, res.output
    [change] = [c for c in json.loads(res.stdout)["changes"] if c["kind"] == "limit"]
    assert (change["name"], change["status"]) == ("billing", "updated")
    assert admin.get_limit("billing")["rate"] == 20.0

    # Pruned: only limits apply manages that no file names.
    (files / "pay-team.yaml").unlink()
    res = run("jobs", "apply", "-f", files, "--prune")
    assert res.exit_code == 0, res.output
    assert "deleted limit pay-team" in res.output
    assert [i["name"] for i in admin.list_limits()] == ["billing", "by-hand"]
    # With no limit in the files, limits are left alone unless --prune-limits.
    (files / "billing.yaml").unlink()
    assert run("jobs", "apply", "-f", files, "--prune").exit_code == 0
    assert [i["name"] for i in admin.list_limits()] == ["billing", "by-hand"]
    res = run("jobs", "apply", "-f", files, "--prune", "--prune-limits")
    assert res.exit_code == 0 and "deleted limit billing" in res.output, res.output
    assert [i["name"] for i in admin.list_limits()] == ["by-hand"]


def test_bad_limit_definitions_name_the_file_and_field_and_change_nothing(run, admin,
                                                                          tmp_path):
    files = tmp_path / "bad"
    write(files, "a", billing(managed_by="me"))
    write(files, "b", billing(name="other", rate=-1))
    write(files, "c", billing(name="other"))
    write(files, "d", billing(name="other"))
    res = run("jobs", "apply", "-f", files)
    assert res.exit_code == RET_ERROR
    assert f"{files / 'a.yaml'}: is set by apply; leave it out (managed_by)" in res.output
    assert f"{files / 'b.yaml'}: must be above 0" in res.output and "(rate)" in res.output
    assert f"{files / 'd.yaml'}: limit other is also defined in {files / 'c.yaml'}" in res.output
    assert admin.list_limits() == []


def test_a_dry_run_shows_the_herd_forecast_with_the_limit_it_would_apply(run, admin, tmp_path):
    files = tmp_path / "herd"
    herd(files, 30)
    write(files, "billing", billing())
    res = run("jobs", "apply", "-f", files, "--dry-run", "--forecast-to", "+2m", "-o", "json")
    assert res.exit_code == 0, res.output
    forecast = json.loads(res.stdout)["forecast"]
    assert forecast["proposal"] == {"jobs": 30, "removed": 0, "limits": 1}
    assert forecast["fires"] >= 30 and forecast["peak"]["fires"] == 30
    [second] = forecast["seconds"][:1]
    assert second["namespaces"] == {"pay": 30} and second["hosts"] == {"billing.internal": 30}
    [limit] = forecast["limits"]
    assert (limit["name"], limit["peak_per_second"], limit["rate"]) == ("billing", 30, 10.0)
    # 30 at the top of the minute, 10 a second: 20 wait, then 10, then none.
    held = [r["waiting"] for r in forecast["held"] if r["at"] == second["at"]]
    assert held == [20], forecast["held"]
    assert limit["seconds_held"] >= 2
    assert admin.list_limits() == [] and list(admin.iter_jobs()) == []

    # The text form, with a read-only token (the forecast's POST only reads).
    res = run("jobs", "apply", "-f", files / "charge-0.yaml", "--dry-run", token="viewer")
    assert res.exit_code == 0, res.output
    assert "forecast once applied:" in res.output and "billing.internal 1" in res.output

    # Applied, then half the herd pruned and the rest moved to another host:
    # the forecast counts the plan, not what is live.
    assert run("jobs", "apply", "-f", files).exit_code == 0
    for i in range(15):
        (files / f"charge-{i}.yaml").unlink()
    for i in range(15, 30):
        write(files, f"charge-{i}", job_spec(
            f"charge-{i}", namespace="pay", schedule=EVERY_MINUTE,
            target={"kind": "http", "url": "https://ledger.internal/charge"}))
    res = run("jobs", "apply", "-f", files, "--prune", "--dry-run", "--forecast-to", "+2m",
              "-o", "json")
    forecast = json.loads(res.stdout)["forecast"]
    assert forecast["proposal"] == {"jobs": 15, "removed": 30, "limits": 1}
    assert forecast["seconds"][0]["hosts"] == {"ledger.internal": 15}
    assert forecast["limits"] == [] and forecast["held"] == []


def test_the_forecast_of_a_proposal_refuses_bad_input_naming_the_field(server, admin):
    base, tokens = server
    url = base + "/v1/forecast"
    cases = [
        ({"jobs": [{"name": "x"}]}, "jobs[0].schedule"),
        ({"jobs": {"name": "x"}}, "jobs"),
        ({"jobs": [{**job_spec("x"), "id": "job_nope"}]}, "jobs[0].id"),
        ({"delete_jobs": [3]}, "delete_jobs[0]"),
        ({"limits": [billing(), billing()]}, "limits[1].name"),
        ({"limits": [billing(rate=0)]}, "limits[0].rate"),
        ({"to": 5}, "to"),
        ({"top": 0}, "top"),
        ({"nope": 1}, "nope"),
    ]
    for body, field in cases:
        status, answer, _ = http("POST", url, body, token=tokens["admin"])
        assert status == 400 and answer["error"]["field"] == field, (body, answer)
    # A namespace token proposes jobs of its namespaces only.
    status, answer, _ = http("POST", url, {"jobs": [job_spec("x", namespace="ops")]},
                             token=tokens["pay"])
    assert status == 403 and answer["error"]["field"] == "jobs[0].namespace", answer
    status, answer, _ = http("POST", url, {"jobs": [job_spec("x", namespace="pay")]},
                             token=tokens["pay"])
    assert status == 200 and answer["proposal"]["jobs"] == 1, answer
    # A read-only token may ask a forecast, and still writes nothing.
    status, _, _ = http("POST", url, {}, token=tokens["viewer"])
    assert status == 200
    status, _, _ = http("POST", base + "/v1/jobs", job_spec("x"), token=tokens["viewer"])
    assert status == 403
