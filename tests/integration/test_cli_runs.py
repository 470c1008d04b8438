"""Runs across jobs through the client (`list_runs`, `iter_runs`) and `cronman runs list`,
against a live `cronman api` on PostgreSQL: every filter, cursor pages, output formats,
errors; and the other list commands (jobs, a job's runs and history, notifications and
rules) paging with the same options."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import yaml
from click.testing import CliRunner

from cronman.cli import cli
from cronman.cli.group import RET_ERROR, RET_UNAVAILABLE, RET_USAGE
from cronman.client import CronmanClient, InvalidRequest, PermissionDenied
from cronman.ids import run_id_for
from cronman.models import Run, RunUpdate
from cronman.store import open_store
from cronman.timeutil import format_rfc3339, parse_rfc3339, utcnow
from tests.support.api import free_port, job_spec, running_api
from tests.support.databases import migrated_pg_database

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

SQS = {"kind": "sqs", "queue_url": "https://sqs.us-east-1.amazonaws.com/1/q",
       "region": "us-east-1", "body": "x"}


def add_runs(store, job_id, items):
    """Claim runs at the given times as a node would, then write their outcomes."""
    runs = [Run(id=run_id_for(job_id, t), job_id=job_id, scheduled_for=t, status="claimed",
                attempt=1, node_id="sched-1", claimed_at=t, lease_expires_at=t)
            for t, _ in items]
    assert store.runs.claim_runs(runs) == {r.id for r in runs}
    store.runs.write_run_updates([
        RunUpdate(id=r.id, scheduled_for=r.scheduled_for, status=status, lateness_ms=5,
                  error="HTTP 500" if status == "failed" else None)
        for r, (_, status) in zip(runs, items, strict=True)])
    return [r.id for r in runs]


@pytest.fixture(scope="module")
def world():
    """A live API on a database of its own: an admin and a billing token, three jobs
    (billing: two http; search: one sqs) with a run every 10 minutes over 3 hours."""
    with migrated_pg_database() as url:
        store = open_store(url)
        try:
            admin, _ = store.tokens.create_token("admin", None)
            billing, _ = store.tokens.create_token("billing", ["billing"])
            with running_api(url) as base, CronmanClient(base, admin) as api:
                jobs = {
                    "digest": api.create_job(job_spec("digest", namespace="billing")),
                    "invoice": api.create_job(job_spec("invoice", namespace="billing")),
                    "index": api.create_job(job_spec("index", namespace="search", target=SQS)),
                }
                now = utcnow().replace(microsecond=0)
                runs = {}
                for k, (name, job) in enumerate(jobs.items()):
                    # 30 s off the 10-minute marks: "-1h" never falls on a run.
                    items = [(now - timedelta(minutes=m, seconds=30 + k),
                              "failed" if m % 30 == 0 else "lost" if m == 50 else "succeeded")
                             for m in range(0, 180, 10)]
                    for rid, (t, status) in zip(add_runs(store, job["id"], items), items,
                                                strict=True):
                        runs[rid] = (name, t, status)
                yield {"base": base, "admin": admin, "billing": billing, "jobs": jobs,
                       "runs": runs, "now": now, "api": api}
        finally:
            store.close()


def expect(world, pred):
    return {rid for rid, (name, t, status) in world["runs"].items() if pred(name, t, status)}


def test_every_filter_through_the_client(world):
    api, jobs, now = world["api"], world["jobs"], world["now"]

    def ids(**filters):
        return {r["id"] for r in api.iter_runs(**filters, page_size=7)}

    assert ids() == set(world["runs"])
    hour = now - timedelta(hours=1)
    failed_last_hour = ids(statuses=["failed"], since="-1h")
    assert failed_last_hour == expect(world, lambda n, t, s: s == "failed" and t >= hour)
    assert len(failed_last_hour) == 6  # minutes 0 and 30, three jobs
    assert ids(statuses=["failed", "lost"]) == expect(world, lambda n, t, s: s != "succeeded")
    assert ids(namespace="search") == expect(world, lambda n, t, s: n == "index")
    assert ids(target_kinds=["sqs"]) == expect(world, lambda n, t, s: n == "index")
    assert ids(target_kinds=["http", "container"]) == expect(world,
                                                             lambda n, t, s: n != "index")
    digest, index = jobs["digest"]["id"], jobs["index"]["id"]
    assert ids(job_ids=[digest]) == expect(world, lambda n, t, s: n == "digest")
    assert ids(job_ids=[digest, index]) == expect(world, lambda n, t, s: n != "invoice")
    lo, hi = now - timedelta(minutes=45), now - timedelta(minutes=15)
    assert ids(since=lo, until=hi) == expect(world, lambda n, t, s: lo <= t < hi)
    assert ids(since=format_rfc3339(lo), until=format_rfc3339(hi)) == ids(since=lo, until=hi)
    assert ids(since="-2h", until="-1h") == expect(
        world, lambda n, t, s: now - timedelta(hours=2) <= t < now - timedelta(hours=1))
    assert ids(since="-1h30m", until="now") == ids(since="-90m")
    # Filters of different kinds all apply.
    assert ids(namespace="billing", statuses=["lost"], since="-1h") == expect(
        world, lambda n, t, s: n != "index" and s == "lost" and t >= hour)
    assert ids(namespace="search", job_ids=[digest]) == set()


def test_pages_follow_the_cursor_newest_first(world):
    api = world["api"]
    seen, cursor, pages = [], None, 0
    while True:
        page = api.list_runs(limit=7, cursor=cursor)
        assert len(page.items) <= 7
        seen += page.items
        pages += 1
        cursor = page.next_cursor
        if cursor is None:
            break
    total = len(world["runs"])
    assert len(seen) == total and pages == -(-total // 7)
    assert [r["id"] for r in seen] == [r["id"] for r in api.iter_runs(page_size=7)]
    keys = [(parse_rfc3339(r["scheduled_for"]), r["id"]) for r in seen]
    assert keys == sorted(keys, reverse=True)
    first = seen[0]
    name = world["runs"][first["id"]][0]
    assert first["job_name"] == name
    assert first["namespace"] == world["jobs"][name]["namespace"]
    # A filtered list pages the same way.
    failed = [r["id"] for r in api.iter_runs(statuses=["failed"], page_size=2)]
    assert len(failed) == len(set(failed)) == len(expect(world, lambda n, t, s: s == "failed"))


def test_bad_filters_name_the_parameter_and_scopes_hold(world):
    api = world["api"]
    for filters, field in (({"since": "yesterday"}, "since"), ({"until": "-1y"}, "until"),
                           ({"statuses": ["done"]}, "status"), ({"job_ids": ["xyz!"]}, "job"),
                           ({"target_kinds": ["ftp"]}, "target_kind"),
                           ({"namespace": "bad ns"}, "namespace"), ({"cursor": "zz"}, "cursor")):
        with pytest.raises(InvalidRequest) as err:
            api.list_runs(**filters)
        assert err.value.field == field, filters
    with CronmanClient(world["base"], world["billing"]) as billing:
        seen = list(billing.iter_runs(page_size=50))
        assert {r["namespace"] for r in seen} == {"billing"}
        assert len(seen) == len(expect(world, lambda n, t, s: n != "index"))
        with pytest.raises(PermissionDenied) as err:
            billing.list_runs(namespace="search")
        assert err.value.status == 403 and err.value.field == "namespace"


@pytest.fixture
def run(world):
    runner = CliRunner()

    def invoke(*args, token=None):
        env = {"CRONMAN_URL": world["base"], "CRONMAN_TOKEN": token or world["admin"]}
        return runner.invoke(cli, ["runs", "list", *args], env=env, catch_exceptions=False)

    return invoke


def test_cli_filters_and_formats(world, run):
    res = run("--status", "failed", "--since", "-1h", "-o", "json")
    assert res.exit_code == 0, res.output
    body = json.loads(res.stdout)
    hour = world["now"] - timedelta(hours=1)
    assert {r["id"] for r in body["items"]} == expect(
        world, lambda n, t, s: s == "failed" and t >= hour)
    assert body["next_cursor"] is None

    res = run("-n", "search", "--status", "lost", "--status", "failed", "--all", "-o", "yaml")
    assert res.exit_code == 0, res.output
    got = {r["id"] for r in yaml.safe_load(res.stdout)["items"]}
    assert got == expect(world, lambda n, t, s: n == "index" and s != "succeeded")

    index = world["jobs"]["index"]["id"]
    res = run("--job", index, "--target-kind", "sqs", "--since=-2h", "--until", "-1h",
              "--limit", "100")
    assert res.exit_code == 0, res.output
    header, *rows = res.stdout.splitlines()
    assert header.split()[:4] == ["RUN", "ID", "JOB", "SCHEDULED"]
    assert len(rows) == 6 and all("search/index" in row for row in rows)

    res = run("--target-kind", "http", "--limit", "3", "-o", "wide")
    assert res.exit_code == 0, res.output
    header, *rows = res.stdout.splitlines()
    assert "NAMESPACE" in header and "JOB ID" in header and len(rows) == 3
    assert all("billing" in row for row in rows)


def test_cli_pages_with_the_cursor_it_prints(world, run):
    res = run("--limit", "20")
    assert res.exit_code == 0, res.output
    assert "more runs: use --all, or --cursor" in res.stderr
    cursor = res.stderr.split("--cursor ")[1].split()[0]
    first = [line.split()[0] for line in res.stdout.splitlines()[1:]]
    nxt = run("--limit", "20", "--cursor", cursor, "-o", "json")
    assert nxt.exit_code == 0, nxt.output
    second = [r["id"] for r in json.loads(nxt.stdout)["items"]]
    every = json.loads(run("--all", "--limit", "20", "-o", "json").stdout)["items"]
    assert first + second == [r["id"] for r in every][:40]
    assert len(every) == len(world["runs"])
    assert run("--all", "--cursor", cursor).exit_code == RET_USAGE


def test_cli_errors(world, run):
    res = run("--since", "yesterday")  # refused before any request, naming the option
    assert res.exit_code == RET_USAGE and "'--since'" in res.stderr and "-1h" in res.stderr
    res = run("-n", "search", token=world["billing"])
    assert res.exit_code == RET_ERROR and "HTTP 403" in res.stderr
    res = run(token="cm_not-a-token")
    assert res.exit_code == RET_ERROR and "HTTP 401" in res.stderr
    assert "check the token given by --token or CRONMAN_TOKEN" in res.stderr
    assert run("--status", "done").exit_code == RET_USAGE
    down = CliRunner().invoke(cli, ["runs", "list", "--url", f"http://127.0.0.1:{free_port()}"],
                              catch_exceptions=False)
    assert down.exit_code == RET_UNAVAILABLE


# -- the other list commands follow the same conventions -------------------------------


def cli_json(*args, world, token=None):
    env = {"CRONMAN_URL": world["base"], "CRONMAN_TOKEN": token or world["admin"]}
    res = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res


def paged(world, *command, limit):
    """A list command read page by page with the --cursor its hint names, and with --all."""
    ids, cursor, hints = [], None, 0
    while True:
        extra = ["--cursor", cursor] if cursor else []
        res = cli_json(*command, "--limit", str(limit), *extra, world=world)
        rows = res.stdout.splitlines()[1:]
        ids += [row.split()[0] for row in rows if row.strip()]
        if "--cursor " not in res.stderr:
            break
        hints += 1
        cursor = res.stderr.split("--cursor ")[1].split()[0]
    every = json.loads(cli_json(*command, "--all", "--limit", str(limit), "-o", "json",
                                world=world).stdout)
    assert every["next_cursor"] is None
    return ids, [item["id"] for item in every["items"]], hints


def test_jobs_history_notifications_page_with_the_same_options(world):
    api, digest = world["api"], world["jobs"]["digest"]
    ids, every, hints = paged(world, "jobs", "list", limit=2)
    assert ids == every and len(every) == 3 and hints == 1

    ids, every, hints = paged(world, "jobs", "runs", digest["id"], limit=7)
    assert ids == every and len(every) == 18 and hints == 2

    job = api.get_job(digest["id"])
    for n in range(3):
        job = api.update_job(job["id"], {"labels": {"n": str(n)}}, version=job["version"])
    times, every, hints = paged(world, "jobs", "history", digest["id"], limit=2)
    # The table's first column is the time of the change.
    assert len(times) == len(every) == 4 and hints == 1
    assert [e["action"] for e in api.iter_job_history(digest["id"])] == [
        "patch", "patch", "patch", "create"]

    for name in ("a", "b", "c"):
        api.create_notification_rule({"namespace": "billing", "name": name,
                                      "events": ["failed"],
                                      "channel": {"kind": "email", "to": ["x@example.com"]}})
    ids, every, hints = paged(world, "notifications", "rules", "list", limit=2)
    assert ids == every and len(every) == 3 and hints == 1
    wide = cli_json("notifications", "rules", "list", "-o", "wide", world=world).stdout
    assert "CREATED" in wide.splitlines()[0] and "UPDATED" in wide.splitlines()[0]

    for fmt in ("table", "wide", "json", "yaml"):
        cli_json("notifications", "list", "--status", "failed", "-o", fmt, world=world)
    res = CliRunner().invoke(cli, ["notifications", "list", "--url", world["base"],
                                   "--token", "cm_wrong"], catch_exceptions=False)
    assert res.exit_code == RET_ERROR and "HTTP 401" in res.stderr
    res = CliRunner().invoke(cli, ["jobs", "history", digest["id"], "--url", world["base"],
                                   "--token", world["admin"], "--cursor", "x y"],
                             catch_exceptions=False)
    assert res.exit_code == RET_ERROR and "(cursor)" in res.stderr
