"""`cronman jobs ...`, `cronman cluster` and `cronman tokens` against a live `cronman api`."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from cronman.cli import cli
from cronman.cli.group import RET_ERROR, RET_UNAVAILABLE
from cronman.cli.output import format_table
from cronman.store.migrate import upgrade
from tests.support.api import free_port, job_spec, running_api

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('cli') / 'cronman.db'}"
    upgrade(url)
    with running_api(url, workers=1) as base:
        yield base


@pytest.fixture
def run(server, tmp_path):
    runner = CliRunner()

    def invoke(*args, env=None, input=None):
        return runner.invoke(cli, list(args), env={"CRONMAN_URL": server, **(env or {})},
                             input=input, catch_exceptions=False)

    return invoke


def write(tmp_path, name, payload):
    path = tmp_path / name
    path.write_text(json.dumps(payload))
    return str(path)


def test_format_table_aligns_columns():
    text = format_table(("ID", "NAME", "COUNT"), [("a", "first", 5), ("bbbb", None, 12)])
    lines = text.splitlines()
    assert lines[0] == "ID    NAME   COUNT"
    assert lines[1] == "a     first      5"
    assert lines[2] == "bbbb  -         12"


def test_create_get_list_pause_resume_trigger_runs_delete(run, tmp_path):
    res = run("jobs", "create", "-f", write(tmp_path, "job.json",
                                            job_spec("cli-one", labels={"team": "a"})))
    assert res.exit_code == 0, res.output
    header, row = res.stdout.splitlines()
    assert header.split() == ["ID", "NAMESPACE", "NAME", "SCHEDULE", "TARGET", "PAUSED",
                              "NEXT", "FIRE"]
    job_id = row.split()[0]
    assert "cli-one" in row and "cron 0 7 * * * (Europe/Berlin)" in row
    # Columns line up: every column starts where its header does.
    assert row.index("cli-one") == header.index(" NAME ") + 1

    res = run("jobs", "get", job_id)
    assert res.exit_code == 0 and "cli-one" in res.stdout and "Bear…" in res.stdout
    assert "abcdefghijklmnop" not in res.stdout
    got = json.loads(run("jobs", "get", job_id, "--json").stdout)
    assert got["id"] == job_id and got["last_run"] is None

    res = run("jobs", "list", "--label", "team:a")
    assert res.exit_code == 0 and job_id in res.stdout
    assert job_id not in run("jobs", "list", "--label", "team:b").stdout

    assert json.loads(run("jobs", "pause", job_id, "--json").stdout)["paused"] is True
    assert job_id in run("jobs", "list", "--paused", "true").stdout
    assert json.loads(run("jobs", "resume", job_id, "--json").stdout)["paused"] is False

    res = run("jobs", "trigger", job_id)
    assert res.exit_code == 0 and "claimed" in res.stdout and "trigger" in res.stdout
    res = run("jobs", "runs", job_id)
    assert res.exit_code == 0 and res.stdout.startswith("RUN ID")
    assert len(res.stdout.splitlines()) == 2
    runs = json.loads(run("jobs", "runs", job_id, "--json", "--status", "claimed").stdout)
    assert len(runs["items"]) == 1

    res = run("jobs", "delete", job_id)
    assert res.exit_code == 0 and f"deleted {job_id}" in res.stdout
    res = run("jobs", "get", job_id)
    assert res.exit_code == RET_ERROR and "HTTP 404" in res.stderr


def test_pause_and_resume_with_a_note_and_the_policies_shown(run, tmp_path):
    spec = job_spec("cli-policies", concurrency="buffer_one", pause_after_failures=5,
                    max_runs=7)
    job_id = json.loads(run("jobs", "create", "-f", write(tmp_path, "p.json", spec),
                            "--json").stdout)["id"]
    res = run("jobs", "pause", job_id, "--note", "vendor outage", "--json")
    paused = json.loads(res.stdout)
    assert paused["paused"] and paused["pause_note"] == "vendor outage"
    res = run("jobs", "list", "-o", "wide")
    assert res.exit_code == 0 and "RUNS LEFT" in res.stdout and "vendor outage" in res.stdout
    resumed = json.loads(run("jobs", "resume", job_id, "--note", "back", "--json").stdout)
    assert (resumed["state"], resumed["pause_note"], resumed["runs_left"]) == ("active", "back",
                                                                              7)
    res = run("jobs", "resume", job_id, "--note", "x" * 1025)
    assert res.exit_code == RET_ERROR and "note" in res.stderr


def test_bulk_create_from_a_list_and_list_all_pages(run, tmp_path):
    specs = [job_spec(f"bulk-{i}", namespace="cli-bulk") for i in range(7)]
    res = run("jobs", "create", "-f", write(tmp_path, "jobs.json", specs), "--json")
    assert res.exit_code == 0, res.output
    assert len(json.loads(res.stdout)["items"]) == 7
    res = run("jobs", "list", "--namespace", "cli-bulk", "--limit", "3")
    assert len(res.stdout.splitlines()) == 4 and "use --all" in res.stderr
    res = run("jobs", "list", "--namespace", "cli-bulk", "--limit", "3", "--all", "--json")
    assert len(json.loads(res.stdout)["items"]) == 7
    # stdin works too.
    res = run("jobs", "create", "-f", "-", input=json.dumps(
        {"jobs": [job_spec("from-stdin", namespace="cli-bulk")]}))
    assert res.exit_code == 0 and "from-stdin" in res.stdout


def test_errors_print_the_api_message_and_exit_non_zero(run, tmp_path):
    bad = job_spec("bad", schedule={"kind": "cron", "cron": "* * * * *", "timezone": "No/Pe"})
    res = run("jobs", "create", "-f", write(tmp_path, "bad.json", bad))
    assert res.exit_code == RET_ERROR
    assert "HTTP 400" in res.stderr and "(schedule.timezone)" in res.stderr
    res = run("jobs", "create", "-f", write(tmp_path, "bulk.json", [job_spec("ok"), bad]))
    assert res.exit_code == RET_ERROR and "(jobs[1].schedule.timezone)" in res.stderr
    res = run("jobs", "get", "0190a1b2-c3d4-7e5f-8a9b-0123456789ab")
    assert res.exit_code == RET_ERROR and "no job" in res.stderr
    (tmp_path / "broken.json").write_text("{")
    assert run("jobs", "create", "-f", str(tmp_path / "broken.json")).exit_code == 2
    res = run("jobs", "list", "--url", f"http://127.0.0.1:{free_port()}")
    assert res.exit_code == RET_UNAVAILABLE and "cannot reach" in res.stderr


def test_cluster(run):
    res = run("cluster")
    assert res.exit_code == 0
    assert "replicas: 2" in res.stdout and "no live scheduler nodes" in res.stdout
    assert "no worker agents" in res.stdout
    assert json.loads(run("cluster", "--json").stdout)["nodes"] == []


def test_tokens_and_an_api_that_needs_them(tmp_path):
    url = f"sqlite:///{tmp_path / 'tokens.db'}"
    upgrade(url)
    runner = CliRunner()

    def cronman(*args, env=None):
        return runner.invoke(cli, list(args), env={"CRONMAN_DATABASE_URL": url, **(env or {})},
                             catch_exceptions=False)

    assert cronman("tokens", "create").exit_code == 2  # --namespace or --admin needed
    assert cronman("tokens", "create", "--admin", "--namespace", "a").exit_code == 2
    assert cronman("tokens", "create", "--namespace", "bad ns").exit_code == 2
    res = cronman("tokens", "create", "--namespace", "team-a", "--name", "ci")
    assert res.exit_code == 0, res.output
    secret = res.stdout.splitlines()[1]
    assert secret.startswith("cm_") and "stored hashed" in res.stderr
    admin = json.loads(cronman("tokens", "create", "--admin", "--json").stdout)
    assert admin["namespaces"] is None and admin["token"]
    listed = cronman("tokens", "list")
    assert listed.exit_code == 0 and "ci" in listed.stdout and "(all)" in listed.stdout
    assert secret not in listed.stdout and admin["token"] not in listed.stdout

    with running_api(url) as base:
        def client(*args, token=None):
            env = {"CRONMAN_URL": base}
            if token:
                env["CRONMAN_TOKEN"] = token
            return runner.invoke(cli, list(args), env=env, catch_exceptions=False)

        res = client("jobs", "list")
        assert res.exit_code == RET_ERROR and "HTTP 401" in res.stderr
        assert "give a token with --token or CRONMAN_TOKEN" in res.stderr
        job = write(tmp_path, "job.json", job_spec("t", namespace="team-a"))
        assert client("jobs", "create", "-f", job, token=secret).exit_code == 0
        other = write(tmp_path, "other.json", job_spec("t", namespace="team-b"))
        res = client("jobs", "create", "-f", other, token=secret)
        assert res.exit_code == RET_ERROR and "HTTP 403" in res.stderr
        assert client("jobs", "create", "-f", other, token=admin["token"]).exit_code == 0

        token_id = json.loads(cronman("tokens", "list", "--json").stdout)[0]["id"]
        assert cronman("tokens", "revoke", token_id).exit_code == 0
        assert cronman("tokens", "revoke", "no-such-token").exit_code == RET_ERROR
        revoked = [t for t in json.loads(cronman("tokens", "list", "--json").stdout)
                   if t["id"] == token_id]
        assert revoked[0]["revoked_at"]


def test_cluster_table_with_nodes_and_agents():
    from cronman.cli.output import cluster_text

    text = cluster_text({"replicas": 2, "nodes": [
        {"id": "sched-1", "address": "10.0.0.1:9000", "started_at": "2026-01-01T00:00:00Z",
         "last_heartbeat": "2026-01-01T00:10:00Z", "heartbeat_age_s": 1.5, "owned_jobs": 120,
         "fires_last_minute": 7, "lock_wins": 30, "lock_losses": 4},
        {"id": "sched-22", "address": "", "started_at": None, "last_heartbeat": None,
         "heartbeat_age_s": None, "owned_jobs": 0, "fires_last_minute": 0, "lock_wins": 0,
         "lock_losses": 0}], "agents": [{"id": "agent-1", "free_cpu": 2}]})
    lines = text.splitlines()
    assert lines[0] == "replicas: 2"
    assert lines[2].split()[:2] == ["NODE", "ADDRESS"]
    assert lines[3].startswith("sched-1 ") and lines[3].endswith("  4")
    assert lines[4].startswith("sched-22") and lines[4].endswith("  0")
    assert "agent-1" in lines[-1]


# -- a job by its name; times relative to now; messages in the CLI's own words ------------


EVERY_MINUTE = {"kind": "cron", "cron": "* * * * *", "timezone": "UTC"}


def test_every_job_command_takes_namespace_name_or_a_name_with_n(run, tmp_path):
    res = run("jobs", "create", "--json", "-f", write(tmp_path, "job.json", job_spec(
        "daily-digest", namespace="examples", schedule=EVERY_MINUTE)))
    assert res.exit_code == 0, res.output
    job_id = json.loads(res.stdout)["id"]
    down = json.loads(run("jobs", "create", "--json", "-f", write(tmp_path, "down.json", job_spec(
        "after-digest", namespace="examples",
        schedule={"kind": "after", "jobs": ["daily-digest"]}))).stdout)

    for ref in (["examples/daily-digest"], ["-n", "examples", "daily-digest"],
                ["daily-digest"], [job_id]):
        res = run("jobs", "get", *ref, "--json")
        assert res.exit_code == 0, (ref, res.output)
        assert json.loads(res.stdout)["id"] == job_id
    ref = "examples/daily-digest"
    assert json.loads(run("jobs", "pause", ref, "--json").stdout)["paused"] is True
    assert json.loads(run("jobs", "resume", "-n", "examples", "daily-digest",
                          "--json").stdout)["paused"] is False
    res = run("jobs", "update", ref, "--set", "labels.team=a", "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["labels"] == {"team": "a"}
    assert len(json.loads(run("jobs", "next", ref, "-c", "3", "--json").stdout)[
        "fire_times"]) == 3
    run_id = json.loads(run("jobs", "trigger", ref, "--json").stdout)["id"]
    assert [r["id"] for r in json.loads(run("jobs", "runs", ref, "--json").stdout)[
        "items"]] == [run_id]
    assert [r["id"] for r in json.loads(run("runs", "list", "--job", ref, "--json").stdout)[
        "items"]] == [run_id]
    assert [r["id"] for r in json.loads(run("runs", "list", "-n", "examples", "--job",
                                            "daily-digest", "--json").stdout)["items"]] == [run_id]
    history = json.loads(run("jobs", "history", ref, "--json").stdout)["items"]
    assert {"create", "pause", "resume", "update", "trigger"} <= {e["action"] for e in history}
    deps = json.loads(run("jobs", "deps", ref, "--json").stdout)
    assert [e["job_id"] for e in deps["downstream"]] == [down["id"]]
    res = run("notifications", "list", "--job", ref, "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["items"] == []
    res = run("jobs", "backfill", ref, "--since", "-3m", "--json")
    assert res.exit_code == 0, res.output

    # Deleting: the 409 names the CLI's flag, not the API's parameter.
    res = run("jobs", "delete", ref)
    assert res.exit_code == RET_ERROR and "examples/after-digest (after)" in res.stderr
    assert "(--force)" in res.stderr and "force=true" not in res.stderr
    res = run("jobs", "delete", "-n", "examples", "daily-digest", "after-digest", "--force")
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines() == [f"deleted daily-digest ({job_id})",
                                       f"deleted after-digest ({down['id']})"]
    res = run("jobs", "get", ref)
    assert res.exit_code == RET_ERROR
    assert "no job named daily-digest in namespace examples" in res.stderr


def test_a_missing_job_says_what_was_asked(run, tmp_path):
    for ns in ("refs-a", "refs-b"):
        assert run("jobs", "create", "-f", write(tmp_path, f"{ns}.json", job_spec(
            "twin", namespace=ns))).exit_code == 0
    absent = "0190a1b2-c3d4-7e5f-8a9b-0123456789ab"
    for args, said in [
        (["jobs", "get", "refs-a/nope"], "no job named nope in namespace refs-a"),
        (["jobs", "get", "-n", "refs-a", "nope"], "no job named nope in namespace refs-a"),
        (["jobs", "trigger", "nope-anywhere"], "no job named nope-anywhere in any namespace"),
        (["jobs", "get", absent], f"no job with id '{absent}'"),
        (["jobs", "delete", absent], f"no job with id '{absent}'"),
        (["jobs", "history", absent], f"no job with id '{absent}'"),
        (["jobs", "runs", "refs-a/nope"], "no job named nope in namespace refs-a"),
        (["runs", "list", "--job", "refs-a/nope"], "no job named nope in namespace refs-a"),
        (["jobs", "get", "twin"], "are in several namespaces (refs-a, refs-b): give "
                                  "namespace/name"),
        # With -n, a reference that does not start with its namespace is a name.
        (["jobs", "get", "-n", "refs-b", "refs-a/twin"], "no job named refs-a/twin in "
                                                         "namespace refs-b"),
    ]:
        res = run(*args)
        assert res.exit_code == RET_ERROR, (args, res.output)
        assert said in res.stderr, (args, res.stderr)
        assert "nothing at" not in res.stderr
    assert run("jobs", "get", "-n", "refs-b", "twin").exit_code == 0


def test_a_name_with_a_slash_is_given_with_n(run, tmp_path):
    """Found in review: names may hold ``/``, yet ``-n billing reports/daily`` was
    refused as "'reports/daily' is in namespace 'reports', not in 'billing'"."""
    res = run("jobs", "create", "--json", "-f", write(tmp_path, "job.json", job_spec(
        "reports/daily", namespace="slashes", schedule=EVERY_MINUTE)))
    assert res.exit_code == 0, res.output
    job_id = json.loads(res.stdout)["id"]
    for ref in (["-n", "slashes", "reports/daily"], ["-n", "slashes", "slashes/reports/daily"],
                ["slashes/reports/daily"]):
        res = run("jobs", "get", *ref, "--json")
        assert res.exit_code == 0, (ref, res.output)
        assert json.loads(res.stdout)["id"] == job_id
    res = run("jobs", "get", "reports/daily")  # no -n: namespace reports
    assert res.exit_code == RET_ERROR
    assert "no job named daily in namespace reports" in res.stderr


def test_every_time_option_takes_now_and_times_relative_to_now(run, tmp_path):
    from datetime import timedelta

    from cronman.timeutil import format_rfc3339, utcnow

    res = run("jobs", "create", "--json", "-f", write(tmp_path, "job.json", job_spec(
        "each-minute", namespace="times", schedule=EVERY_MINUTE)))
    job_id = json.loads(res.stdout)["id"]
    minute = utcnow().replace(second=0, microsecond=0)
    fixed = ["--since", format_rfc3339(minute - timedelta(minutes=5)),
             "--until", format_rfc3339(minute - timedelta(minutes=1))]
    res = run("jobs", "backfill", job_id, *fixed)
    assert res.stdout == "requested 5 runs for 5 fire times in the range\n", res.output
    res = run("jobs", "backfill", job_id, *fixed)  # why none, this time
    assert res.stdout == ("requested 0 runs for 5 fire times in the range: each already has "
                          "a run\n"), res.output

    res = run("jobs", "backfill", job_id, "--since", "-10m", "--until", "now", "--json")
    assert res.exit_code == 0, res.output
    answer = json.loads(res.stdout)
    assert answer["fire_times"] - answer["requested"] == 5 and answer["requested"] >= 4
    res = run("jobs", "backfill", "times/each-minute", "--since", "-2h", "--until", "-90m")
    assert res.exit_code == 0 and res.stdout.startswith("requested 30 runs for 30 "), res.output

    assert 1 <= len(json.loads(run("jobs", "runs", job_id, "--since", "-1m", "--json").stdout)[
        "items"]) <= 2
    runs = json.loads(run("jobs", "runs", job_id, "--since", "-3h", "--until", "now",
                          "--json", "--all", "--limit", "7").stdout)["items"]
    assert len(runs) == 5 + answer["requested"] + 30
    assert json.loads(run("jobs", "runs", job_id, "--since", "-11m", "--until", "-6m",
                          "--json").stdout)["items"]
    for args in (["jobs", "runs", job_id, "--since", "yesterday"],
                 ["jobs", "backfill", job_id, "--since", "-5x"],
                 ["runs", "list", "--until", "2026-13-01T00:00:00Z"]):
        res = run(*args)
        assert res.exit_code == 2, (args, res.output)
        assert "'now', or relative to now" in res.stderr and "--" in res.stderr


def test_the_client_names_jobs_and_reads_relative_times(server):
    from datetime import timedelta

    from cronman.client import CronmanClient, NotFoundError
    from cronman.timeutil import utcnow

    with CronmanClient(server) as api:
        job = api.create_job(job_spec("by-name", namespace="client-side",
                                      schedule=EVERY_MINUTE))
        assert api.resolve_job("client-side/by-name") == job["id"]
        assert api.get_job("by-name", namespace="client-side")["id"] == job["id"]
        assert [j["id"] for j in api.list_jobs(name="by-name").items] == [job["id"]]
        answer = api.backfill_job("client-side/by-name", "-3m", "now")
        assert 2 <= answer["requested"] == answer["fire_times"] <= 3
        runs = api.list_job_runs("by-name", namespace="client-side", since="-1h").items
        assert len(runs) == answer["requested"]
        until = utcnow() - timedelta(hours=1)
        assert api.list_job_runs(job["id"], until=until).items == []
        assert len(list(api.iter_runs(job_ids=["client-side/by-name"], since="-1h"))) == len(
            runs)
        assert len(api.next_fires("client-side/by-name", 2)["fire_times"]) == 2
        api.pause_job("client-side/by-name")
        assert api.get_job(job["id"])["paused"] is True
        api.delete_job("by-name", namespace="client-side")
        with pytest.raises(NotFoundError, match="no job named by-name in namespace client-side"):
            api.trigger_job("client-side/by-name")


HTML_502 = """<!DOCTYPE html>
<html>
<head><title>502 Bad Gateway</title>
<style>body { font-family: sans-serif; margin: 4em; }</style></head>
<body>
<center><h1>502 Bad Gateway</h1></center>
<hr><center>nginx/1.24.0</center>
""" + "<!-- a padding comment -->\n" * 20 + "</body></html>\n"


@pytest.fixture
def html_proxy():
    """A loopback HTTP server answering every request as a broken proxy does: 502, HTML."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            body = HTML_502.encode()
            self.send_response(502)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.parametrize("fmt", ["table", "wide", "json"])
def test_an_html_error_page_is_shown_as_its_status_and_a_short_excerpt(run, html_proxy, fmt):
    res = run("jobs", "list", "-o", fmt, "--url", html_proxy)
    assert res.exit_code == RET_UNAVAILABLE, res.output
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert lines == ["error: HTTP 502: 502 Bad Gateway (an HTML page, not the API's JSON)"]
