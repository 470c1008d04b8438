"""`cronman jobs apply` and the client commands against a real API (gunicorn) on PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from cronman.apply import DIGEST_LABEL, MANAGED_LABEL, execute, make_plan
from cronman.apply.plan import desired_definitions
from cronman.cli import cli
from cronman.cli.group import RET_ERROR
from cronman.client import CronmanClient
from tests.support.api import job_spec, running_api

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    from tests.support.databases import migrated_pg_database

    with migrated_pg_database() as url:
        with running_api(url, workers=2) as base:
            yield base


@pytest.fixture
def client(api):
    with CronmanClient(api) as c:
        yield c


@pytest.fixture
def run(api):
    runner = CliRunner()

    def invoke(*args, input=None):
        return runner.invoke(cli, [str(a) for a in args], env={"CRONMAN_URL": api},
                             input=input, catch_exceptions=False)

    return invoke


def write_jobs(folder: Path, namespace: str, names: list[str], **overrides) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        spec = job_spec(name, namespace=namespace, **overrides)
        (folder / f"{name}.yaml").write_text(yaml.safe_dump(spec))


def live(client, namespace):
    return {j["name"]: j for j in client.iter_jobs(namespace=namespace)}


def test_apply_twice_changes_nothing_the_second_time(run, client, tmp_path):
    write_jobs(tmp_path / "jobs", "apply-a", ["one", "two", "three"])
    res = run("jobs", "apply", "-f", tmp_path / "jobs")
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines()[-1] == "3 created, 0 updated, 0 deleted, 0 unchanged"
    first = live(client, "apply-a")
    assert set(first) == {"one", "two", "three"}
    assert all(j["labels"][MANAGED_LABEL] == "apply" for j in first.values())

    res = run("jobs", "apply", "-f", tmp_path / "jobs")
    assert res.exit_code == 0 and res.stdout.strip() == "no changes: 3 jobs unchanged"
    second = live(client, "apply-a")
    assert {n: j["version"] for n, j in second.items()} == {
        n: j["version"] for n, j in first.items()}


def test_editing_one_file_updates_one_job(run, client, tmp_path):
    folder = tmp_path / "jobs"
    write_jobs(folder, "apply-b", ["one", "two"])
    assert run("jobs", "apply", "-f", folder).exit_code == 0
    before = live(client, "apply-b")
    spec = yaml.safe_load((folder / "two.yaml").read_text())
    spec["schedule"]["cron"] = "30 8 * * *"
    (folder / "two.yaml").write_text(yaml.safe_dump(spec))

    res = run("jobs", "apply", "-f", folder, "--dry-run")
    assert res.exit_code == 0
    assert "~ update apply-b/two" in res.stdout and "-  cron: 0 7 * * *" in res.stdout
    assert "+  cron: 30 8 * * *" in res.stdout and "nothing was changed" in res.stdout
    assert live(client, "apply-b")["two"]["version"] == before["two"]["version"]

    res = run("jobs", "apply", "-f", folder)
    assert res.exit_code == 0, res.output
    assert "updated apply-b/two (schedule)" in res.stdout
    assert res.stdout.splitlines()[-1] == "0 created, 1 updated, 0 deleted, 1 unchanged"
    after = live(client, "apply-b")
    assert after["two"]["schedule"]["cron"] == "30 8 * * *"
    assert after["two"]["version"] == before["two"]["version"] + 1
    assert after["one"]["version"] == before["one"]["version"]


def test_a_rotated_secret_is_seen_through_the_digest(run, client, tmp_path):
    folder = tmp_path / "jobs"
    write_jobs(folder, "apply-c", ["secret"])
    assert run("jobs", "apply", "-f", folder).exit_code == 0
    digest = live(client, "apply-c")["secret"]["labels"][DIGEST_LABEL]
    # Same first four characters and length class: the redacted form does not change.
    text = (folder / "secret.yaml").read_text().replace("abcdefghijklmnop", "abcdZZZZZZZZZZZZ")
    (folder / "secret.yaml").write_text(text)
    res = run("jobs", "apply", "-f", folder, "--dry-run")
    assert "only the applied digest differs" in res.stdout
    res = run("jobs", "apply", "-f", folder)
    assert "updated apply-c/secret (a redacted value)" in res.stdout
    assert live(client, "apply-c")["secret"]["labels"][DIGEST_LABEL] != digest
    assert run("jobs", "apply", "-f", folder).stdout.startswith("no changes")


def test_a_change_by_hand_is_undone(run, client, tmp_path):
    folder = tmp_path / "jobs"
    write_jobs(folder, "apply-d", ["drift"])
    assert run("jobs", "apply", "-f", folder).exit_code == 0
    job = live(client, "apply-d")["drift"]
    client.update_job(job["id"], {"priority": 7})
    res = run("jobs", "apply", "-f", folder)
    assert "updated apply-d/drift (priority)" in res.stdout
    assert live(client, "apply-d")["drift"]["priority"] == 0


def test_prune_deletes_only_jobs_apply_manages(run, client, tmp_path):
    folder = tmp_path / "jobs"
    write_jobs(folder, "apply-e", ["keep", "gone"])
    assert run("jobs", "apply", "-f", folder).exit_code == 0
    hand_made = client.create_job(job_spec("by-hand", namespace="apply-e"))
    other_ns = client.create_job(job_spec("elsewhere", namespace="apply-e2",
                                          labels={MANAGED_LABEL: "apply"}))
    (folder / "gone.yaml").unlink()

    res = run("jobs", "apply", "-f", folder)  # without --prune nothing is deleted
    assert res.stdout.strip() == "no changes: 1 jobs unchanged"
    res = run("jobs", "apply", "-f", folder, "--prune", "--dry-run")
    assert "- delete apply-e/gone" in res.stdout and "by-hand" not in res.stdout
    assert set(live(client, "apply-e")) == {"keep", "gone", "by-hand"}

    res = run("jobs", "apply", "-f", folder, "--prune")
    assert res.exit_code == 0 and "deleted apply-e/gone" in res.stdout
    assert set(live(client, "apply-e")) == {"keep", "by-hand"}
    assert client.get_job(hand_made["id"])["name"] == "by-hand"
    assert client.get_job(other_ns["id"])["name"] == "elsewhere"


def test_prune_with_a_selector_spares_other_teams(run, client, tmp_path):
    team_a, team_b = tmp_path / "a", tmp_path / "b"
    write_jobs(team_a, "apply-f", ["a1", "a2"], labels={"team": "a"})
    write_jobs(team_b, "apply-f", ["b1"], labels={"team": "b"})
    assert run("jobs", "apply", "-f", team_a).exit_code == 0
    assert run("jobs", "apply", "-f", team_b).exit_code == 0
    (team_a / "a2.yaml").unlink()
    res = run("jobs", "apply", "-f", team_a, "--prune", "-l", "team:a")
    assert "deleted apply-f/a2" in res.stdout
    assert set(live(client, "apply-f")) == {"a1", "b1"}


def test_a_concurrent_edit_is_a_conflict_not_overwritten(client, tmp_path):
    folder = tmp_path / "jobs"
    write_jobs(folder, "apply-g", ["raced"])
    spec = job_spec("raced", namespace="apply-g")
    desired, _ = desired_definitions([("raced.yaml", spec)])
    execute(client, make_plan(desired, client.iter_jobs(namespace="apply-g")))
    spec["priority"] = 3
    desired, _ = desired_definitions([("raced.yaml", spec)])
    plan = make_plan(desired, client.iter_jobs(namespace="apply-g"))
    assert [c.name for c in plan.updates] == ["raced"]
    job = live(client, "apply-g")["raced"]
    client.update_job(job["id"], {"paused": True})  # someone else, between read and write
    result = execute(client, plan)
    assert [o.status for o in result.outcomes] == ["conflict"]
    assert result.outcomes[0].error.status == 409
    now = live(client, "apply-g")["raced"]
    assert now["paused"] is True and now["priority"] == 0


def test_invalid_definitions_name_file_and_field_and_change_nothing(run, client, tmp_path):
    folder = tmp_path / "jobs"
    write_jobs(folder, "apply-h", ["fine"])
    bad = job_spec("bad", namespace="apply-h")
    bad["schedule"]["timezone"] = "No/Where"
    (folder / "bad.yaml").write_text(yaml.safe_dump(bad))
    (folder / "dup.json").write_text(json.dumps([job_spec("fine", namespace="apply-h")]))
    res = run("jobs", "apply", "-f", folder)
    assert res.exit_code == RET_ERROR
    assert f"{folder / 'bad.yaml'}: " in res.stderr and "(schedule.timezone)" in res.stderr
    assert "apply-h/fine is also defined in" in res.stderr
    assert "nothing was applied" in res.stderr
    assert live(client, "apply-h") == {}


def test_bulk_create_past_the_api_limit_is_chunked(run, client, tmp_path):
    specs = [job_spec(f"bulk-{i:04d}", namespace="cli-chunks") for i in range(1001)]
    path = tmp_path / "many.json"
    path.write_text(json.dumps({"jobs": specs}))
    res = run("jobs", "create", "-f", path, "-o", "json")
    assert res.exit_code == 0, res.output
    assert len(json.loads(res.stdout)["items"]) == 1001
    assert len(list(client.iter_jobs(namespace="cli-chunks"))) == 1001
    specs = [job_spec(f"small-{i}", namespace="cli-chunks2") for i in range(5)]
    specs[3]["schedule"] = {"kind": "cron", "cron": "nope"}
    path.write_text(json.dumps(specs))
    res = run("jobs", "create", "-f", path, "--chunk-size", "2")
    assert res.exit_code == RET_ERROR and "(jobs[3].schedule.cron)" in res.stderr
    assert "created 2 of 5 jobs before the error" in res.stderr


def test_update_next_backfill_runs_get_replay_and_formats(run, client, tmp_path):
    job = client.create_job(job_spec("verbs", namespace="cli-verbs"))
    res = run("jobs", "update", job["id"], "--set", "schedule.cron=15 6 * * *",
              "--set", "labels.team=ops", "-o", "json")
    assert res.exit_code == 0, res.output
    updated = json.loads(res.stdout)
    assert updated["schedule"]["cron"] == "15 6 * * *" and updated["labels"] == {"team": "ops"}
    assert updated["target"]["headers"]["Authorization"] == "Bear…"
    stored = client.get_job(job["id"])
    assert stored["version"] == job["version"] + 1
    res = run("jobs", "update", job["id"], "--set", "priority=2", "--if-version", "1")
    assert res.exit_code == RET_ERROR and "not 1" in res.stderr
    res = run("jobs", "update", job["id"], "--set", "schedule.timezone=Mars/Base")
    assert res.exit_code == RET_ERROR and "(schedule.timezone)" in res.stderr

    res = run("jobs", "next", job["id"], "--count", "3", "-o", "yaml")
    assert len(yaml.safe_load(res.stdout)["fire_times"]) == 3
    res = run("jobs", "backfill", job["id"], "--since", "2026-01-01T00:00:00Z",
              "--until", "2026-01-03T12:00:00Z")
    assert res.exit_code == 0 and res.stdout == "requested 3 runs for 3 fire times in the range\n"
    runs = client.list_job_runs(job["id"]).items
    assert len(runs) == 3
    res = run("runs", "get", runs[0]["id"], "-o", "json")
    assert json.loads(res.stdout)["id"] == runs[0]["id"]
    res = run("runs", "get", runs[0]["id"])
    assert res.stdout.startswith("FIELD") and "backfill" in res.stdout
    # A claimed run has not finished: the API refuses to replay it, naming why.
    res = run("jobs", "replay", runs[0]["id"])
    assert res.exit_code == RET_ERROR and "HTTP 409" in res.stderr
    res = run("jobs", "list", "--namespace", "cli-verbs", "-o", "wide")
    assert "VERSION" in res.stdout.splitlines()[0] and "team=ops" in res.stdout
    res = run("jobs", "runs", job["id"], "--all", "-o", "wide")
    assert len(res.stdout.splitlines()) == 4 and "JOB ID" in res.stdout


def test_an_interval_without_anchor_keeps_the_anchor_it_was_created_with(client, tmp_path):
    spec = job_spec("phase", namespace="apply-i", schedule={"kind": "interval", "every": 300})
    desired, _ = desired_definitions([("phase.yaml", spec)])
    execute(client, make_plan(desired, []))
    job = live(client, "apply-i")["phase"]
    # The server anchors at the request's second; the row's created_at may be the next one.
    later = dict(job, created_at="2099-01-01T00:00:00Z")
    plan = make_plan(desired, [later])
    assert plan.unchanged == ["apply-i/phase"]
    spec["priority"] = 1
    desired, _ = desired_definitions([("phase.yaml", spec)])
    plan = make_plan(desired, [job])
    assert plan.updates[0].spec["schedule"]["anchor"] == job["schedule"]["anchor"]
    execute(client, plan)
    assert live(client, "apply-i")["phase"]["schedule"]["anchor"] == job["schedule"]["anchor"]


def test_a_pause_by_hand_stays_unless_the_file_says_paused(run, client, tmp_path):
    folder = tmp_path / "jobs"
    write_jobs(folder, "apply-j", ["held"])
    assert run("jobs", "apply", "-f", folder).exit_code == 0
    job = live(client, "apply-j")["held"]
    client.pause_job(job["id"])
    assert run("jobs", "apply", "-f", folder).stdout.strip() == "no changes: 1 jobs unchanged"
    assert live(client, "apply-j")["held"]["paused"] is True
    write_jobs(folder, "apply-j", ["held"], paused=False)
    assert "updated apply-j/held (paused" in run("jobs", "apply", "-f", folder).stdout
    assert live(client, "apply-j")["held"]["paused"] is False


def test_prune_leaves_a_job_changed_since_it_was_read(client, tmp_path):
    for name in ("stays", "pruned", "relabelled"):
        spec = job_spec(name, namespace="apply-k")
        desired, _ = desired_definitions([(f"{name}.yaml", spec)])
        execute(client, make_plan(desired, client.iter_jobs(namespace="apply-k")))
    desired, _ = desired_definitions([("stays.yaml", job_spec("stays", namespace="apply-k"))])
    plan = make_plan(desired, client.iter_jobs(namespace="apply-k"),
                     prune_namespaces=["apply-k"])
    assert [c.name for c in plan.deletes] == ["pruned", "relabelled"]
    taken = live(client, "apply-k")["relabelled"]
    client.update_job(taken["id"], {"labels": {"owner": "by-hand"}})  # adopted by a person
    result = execute(client, plan)
    assert sorted((o.change.name, o.status) for o in result.outcomes) == [
        ("pruned", "deleted"), ("relabelled", "conflict")]
    assert set(live(client, "apply-k")) == {"stays", "relabelled"}


def test_apply_a_chain_named_by_name_then_again_changes_nothing(run, client, tmp_path):
    folder = tmp_path / "chain"
    folder.mkdir()
    (folder / "up.yaml").write_text(yaml.safe_dump(job_spec(
        "up", namespace="apply-wf", schedule={"kind": "interval", "every": 60})))
    (folder / "down.yaml").write_text(yaml.safe_dump(job_spec(
        "down", namespace="apply-wf", schedule={"kind": "after", "jobs": ["up"]},
        depends_on=[{"job": "apply-wf/up", "within": 60}])))
    res = run("jobs", "apply", "-f", folder)
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines()[-1] == "2 created, 0 updated, 0 deleted, 0 unchanged"
    res = run("jobs", "apply", "-f", folder)
    assert res.stdout.splitlines()[-1] == "no changes: 2 jobs unchanged"
    jobs = live(client, "apply-wf")
    assert jobs["down"]["schedule"]["jobs"] == [jobs["up"]["id"]]
    res = run("jobs", "deps", jobs["down"]["id"])
    assert res.exit_code == 0 and "apply-wf/up" in res.output and "after" in res.output
    res = run("jobs", "delete", jobs["up"]["id"])
    assert res.exit_code != 0 and "apply-wf/down" in res.output
    res = run("jobs", "delete", "--force", jobs["up"]["id"])
    assert res.exit_code == 0, res.output


def test_calendars_through_the_cli(run, client, tmp_path):
    path = tmp_path / "holidays.yaml"
    path.write_text(yaml.safe_dump({"name": "holidays", "timezone": "Europe/Berlin",
                                    "dates": ["--12-25", "2026-12-24"]}))
    res = run("calendars", "create", "-f", path, "-n", "apply-cal")
    assert res.exit_code == 0, res.output
    res = run("calendars", "list", "-n", "apply-cal", "-o", "json")
    [cal] = json.loads(res.output)["items"]
    assert cal["dates"] == ["--12-25", "2026-12-24"]
    job = client.create_job(job_spec("report", namespace="apply-cal",
                                     schedule={"kind": "cron", "cron": "0 7 * * *"},
                                     calendars=["holidays"]))
    res = run("jobs", "next", job["id"], "-c", "40")
    assert res.exit_code == 0
    res = run("calendars", "delete", cal["id"])
    assert res.exit_code != 0 and "apply-cal/report" in res.output
    assert run("calendars", "delete", cal["id"], "--force").exit_code == 0


def test_the_policies_diff_and_apply(run, client, tmp_path):
    folder = tmp_path / "jobs"
    write_jobs(folder, "apply-p", ["guarded"], concurrency="buffer_all", buffer_limit=10,
               pause_after_failures=3)
    assert run("jobs", "apply", "-f", folder).exit_code == 0
    job = live(client, "apply-p")["guarded"]
    assert (job["buffer_limit"], job["pause_after_failures"], job["max_runs"]) == (10, 3, None)
    assert run("jobs", "apply", "-f", folder).stdout.strip() == "no changes: 1 jobs unchanged"
    write_jobs(folder, "apply-p", ["guarded"], concurrency="buffer_all", buffer_limit=10,
               pause_after_failures=5, max_runs=100)
    res = run("jobs", "apply", "-f", folder, "--dry-run")
    assert "~ update apply-p/guarded" in res.stdout and "+max_runs: 100" in res.stdout
    res = run("jobs", "apply", "-f", folder)
    assert "updated apply-p/guarded (pause_after_failures, max_runs)" in res.stdout, res.stdout
    job = live(client, "apply-p")["guarded"]
    assert (job["pause_after_failures"], job["max_runs"], job["runs_left"]) == (5, 100, 100)
    # A definition exported from the API, state keys and all, is taken (the
    # server's keys left out; the secrets' digest, made by apply, is new).
    exported = dict(client.get_job(job["id"]), target=job_spec("x")["target"])
    assert "runs_left" in exported and "buffered" in exported
    exported["labels"] = {k: v for k, v in exported["labels"].items()
                          if k not in (MANAGED_LABEL, DIGEST_LABEL)}
    (folder / "guarded.yaml").write_text(yaml.safe_dump(exported))
    res = run("jobs", "apply", "-f", folder)
    assert res.exit_code == 0, res.output
    assert live(client, "apply-p")["guarded"]["max_runs"] == 100
