"""Idempotency keys through the CLI against a live `cronman api`: a command
given `--idempotency-key` and run again makes nothing more (one job, one
run, one backfill, one replay), the key with other arguments is refused
naming the option, and `jobs apply`'s bulk create sent again after a lost
answer (through a proxy that drops it) creates each job once."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest
import yaml
from click.testing import CliRunner

from cronman.cli import cli
from cronman.cli.group import RET_ERROR
from cronman.client import CronmanClient
from cronman.models import RunUpdate
from cronman.store import open_store
from cronman.store.migrate import upgrade
from cronman.timeutil import utcnow
from tests.support.api import free_port, job_spec, running_api

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def database(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('cli-keys') / 'cronman.db'}"
    upgrade(url)
    return url


@pytest.fixture(scope="module")
def server(database):
    with running_api(database, workers=1) as base:
        yield base


@pytest.fixture
def client(server):
    with CronmanClient(server) as c:
        yield c


@pytest.fixture
def run(server):
    runner = CliRunner()

    def invoke(*args, url=server):
        return runner.invoke(cli, [str(a) for a in args], env={"CRONMAN_URL": url},
                             catch_exceptions=False)

    return invoke


def write(tmp_path, name, payload) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(payload))
    return str(path)


def refused(res) -> bool:
    """The API's 422 for a key used with another request, named as the CLI's option."""
    return (res.exit_code == RET_ERROR and "HTTP 422" in res.stderr
            and "use a new key (--idempotency-key)" in res.stderr)


def test_create_twice_with_a_key_makes_one_job_and_another_body_is_refused(run, client,
                                                                          tmp_path):
    path = write(tmp_path, "job.json", job_spec("keyed", namespace="keys-one"))
    first = run("jobs", "create", "-f", path, "--idempotency-key", "create-1", "--json")
    assert first.exit_code == 0, first.output
    again = run("jobs", "create", "-f", path, "--idempotency-key", "create-1", "--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout) == json.loads(first.stdout)
    assert [j["name"] for j in client.iter_jobs(namespace="keys-one")] == ["keyed"]
    # Without the key the same file is a second create: the name is taken.
    plain = run("jobs", "create", "-f", path)
    assert plain.exit_code == RET_ERROR and "HTTP 409" in plain.stderr
    other = write(tmp_path, "other.json", job_spec("keyed", namespace="keys-one", priority=3))
    assert refused(run("jobs", "create", "-f", other, "--idempotency-key", "create-1"))
    assert client.get_job(json.loads(first.stdout)["id"])["priority"] == 0


def test_bulk_create_with_a_key_sends_each_request_its_own(run, client, tmp_path):
    specs = [job_spec(f"bulk-{i}", namespace="keys-bulk") for i in range(5)]
    path = write(tmp_path, "jobs.json", specs)
    args = ("jobs", "create", "-f", path, "--chunk-size", "2", "--idempotency-key", "bulk-1",
            "--json")
    first = run(*args)
    assert first.exit_code == 0, first.output
    again = run(*args)
    assert again.exit_code == 0, again.output
    ids = [j["id"] for j in json.loads(first.stdout)["items"]]
    assert [j["id"] for j in json.loads(again.stdout)["items"]] == ids
    assert len(list(client.iter_jobs(namespace="keys-bulk"))) == 5
    # One job more: requests 1 and 2 are the same and answered again, the
    # third (2 jobs now, not 1) is another request under bulk-1/3: refused.
    more = write(tmp_path, "more.json", [*specs, job_spec("bulk-5", namespace="keys-bulk")])
    res = run("jobs", "create", "-f", more, "--chunk-size", "2", "--idempotency-key", "bulk-1")
    assert refused(res) and "created 4 of 6 jobs before the error" in res.stderr
    assert len(list(client.iter_jobs(namespace="keys-bulk"))) == 5


def test_trigger_backfill_and_replay_with_a_key_happen_once(run, client, database,
                                                            tmp_path):
    job = client.create_job(job_spec("verbs", namespace="keys-verbs",
                                     schedule={"kind": "interval", "every": 3600,
                                               "anchor": "2026-01-01T00:00:00Z"}))
    other = client.create_job(job_spec("other", namespace="keys-verbs"))
    first = run("jobs", "trigger", job["id"], "--idempotency-key", "trigger-1", "--json")
    assert first.exit_code == 0, first.output
    again = run("jobs", "trigger", "keys-verbs/verbs", "--idempotency-key", "trigger-1",
                "--json")  # named otherwise, the same call: its path holds the id
    assert again.exit_code == 0, again.output
    run_id = json.loads(first.stdout)["id"]
    assert json.loads(again.stdout)["id"] == run_id
    assert [r["origin"] for r in client.list_job_runs(job["id"]).items] == ["trigger"]
    assert refused(run("jobs", "trigger", other["id"], "--idempotency-key", "trigger-1"))

    span = ("--since", "2026-01-01T00:00:00Z", "--until", "2026-01-01T02:30:00Z")
    fill = ("jobs", "backfill", job["id"], *span, "--idempotency-key", "fill-1")
    res = run(*fill)
    assert res.exit_code == 0 and res.stdout == ("requested 3 runs for 3 fire times in the "
                                                 "range\n"), res.output
    res = run(*fill)  # the first answer again, not "0 runs": nothing was run twice
    assert res.exit_code == 0 and res.stdout.startswith("requested 3 runs"), res.output
    assert len(client.list_job_runs(job["id"]).items) == 4
    assert refused(run("jobs", "backfill", job["id"], "--since", "2026-01-01T00:00:00Z",
                       "--until", "2026-01-01T01:30:00Z", "--idempotency-key", "fill-1"))

    store = open_store(database)
    try:
        store.runs.write_run_updates([RunUpdate(
            id=run_id, scheduled_for=store.runs.get_run(run_id).scheduled_for,
            status="failed", attempt=1, finished_at=utcnow(), error="x")])
    finally:
        store.close()
    replay = ("runs", "replay", run_id, "--idempotency-key", "replay-1", "--json")
    first = run(*replay)
    assert first.exit_code == 0, first.output
    again = run("jobs", "replay", run_id, "--idempotency-key", "replay-1", "--json")
    assert again.exit_code == 0 and json.loads(again.stdout) == json.loads(first.stdout)
    assert client.get_run(run_id)["attempt"] == 2  # one new attempt
    # Without the key it is another replay, refused: the run is in flight again.
    res = run("runs", "replay", run_id)
    assert res.exit_code == RET_ERROR and "HTTP 409" in res.stderr


def test_a_bad_key_is_refused_naming_the_option(run, client):
    job = client.create_job(job_spec("bad-key", namespace="keys-bad"))
    for key in ("   ", "k" * 256, "naïve"):
        res = run("jobs", "trigger", job["id"], "--idempotency-key", key)
        assert res.exit_code == RET_ERROR and "HTTP 400" in res.stderr, (key, res.output)
        assert "printable ASCII characters" in res.stderr and "(--idempotency-key)" in (
            res.stderr)
    assert client.list_job_runs(job["id"]).items == []


@contextmanager
def losing_first_bulk_answer(upstream: str) -> Iterator[tuple[str, list[tuple[str, str]]]]:
    """A proxy to ``upstream`` that forwards every request, but closes the
    connection instead of answering the first ``POST /v1/jobs/bulk`` (its
    answer lost on the way back); logs (path, Idempotency-Key) of each POST."""
    target = urlsplit(upstream)
    seen: list[tuple[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _forward(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            conn = http.client.HTTPConnection(target.hostname, target.port, timeout=30)
            try:
                conn.request(self.command, self.path, body=body or None,
                             headers={k: v for k, v in self.headers.items()
                                      if k.lower() not in ("host", "connection")})
                resp = conn.getresponse()
                data = resp.read()
            finally:
                conn.close()
            if self.command == "POST":
                seen.append((self.path, self.headers.get("Idempotency-Key") or ""))
                if self.path == "/v1/jobs/bulk" and sum(
                        1 for p, _ in seen if p == "/v1/jobs/bulk") == 1:
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
            self.send_response(resp.status)
            for key, value in resp.getheaders():
                if key.lower() not in ("connection", "transfer-encoding", "content-length"):
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = _forward  # noqa: N815

    proxy = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{proxy.server_address[1]}", seen
    finally:
        proxy.shutdown()
        proxy.server_close()


def test_apply_sends_its_bulk_create_again_after_a_lost_answer_and_creates_once(
        run, client, server, tmp_path):
    folder = tmp_path / "jobs"
    folder.mkdir()
    for name in ("one", "two", "three"):
        (folder / f"{name}.yaml").write_text(yaml.safe_dump(job_spec(name,
                                                                     namespace="keys-apply")))
    with losing_first_bulk_answer(server) as (url, seen):
        res = run("jobs", "apply", "-f", folder, url=url)
        assert res.exit_code == 0, res.output
        assert res.stdout.splitlines()[-1] == "3 created, 0 updated, 0 deleted, 0 unchanged"
        # Sent twice under one key: the API answered the repeat with the first answer.
        bulk = [key for path, key in seen if path == "/v1/jobs/bulk"]
        assert len(bulk) == 2 and bulk[0] == bulk[1] != ""
        res = run("jobs", "apply", "-f", folder, url=url)
        assert res.exit_code == 0 and res.stdout.strip() == "no changes: 3 jobs unchanged"
    assert sorted(j["name"] for j in client.iter_jobs(namespace="keys-apply")) == [
        "one", "three", "two"]
