"""Every example in examples/ runs against a real cronman (standalone on SQLite):
the client script, the apply definitions, the Flask receiver (Redis deduplication)
and the SQS consumer (moto in server mode)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner

from cronman.cli import cli
from cronman.client import CronmanClient
from cronman.signing import namespace_key, sign
from tests.support.api import REPO, free_port
from tests.support.moto import AWS_TEST_ENV, moto_server
from tests.support.processes import Processes

pytestmark = pytest.mark.slow

EXAMPLES = REPO / "examples"
SECRET = "examples-secret"


@pytest.fixture
def cronman(tmp_path):
    with Processes(tmp_path) as procs:
        env = {"CRONMAN_SIGNING_SECRET": SECRET, **AWS_TEST_ENV}
        node = procs.standalone(f"sqlite:///{tmp_path / 'cronman.db'}", env=env)
        yield node.url  # type: ignore[attr-defined]


def example(name: str, env: dict[str, str], tmp_path, *args: str) -> subprocess.Popen[bytes]:
    full = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), **env}
    log = open(tmp_path / f"{name}.log", "wb")  # noqa: SIM115 (closed with the process)
    return subprocess.Popen([sys.executable, str(EXAMPLES / name), *args], env=full,
                            stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)


def soon(seconds: float = 2) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def wait_run(api: CronmanClient, job_id: str, done, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        items = api.list_job_runs(job_id).items
        if items:
            last = items[0]
            if done(last):
                return last
        time.sleep(0.3)
    raise AssertionError(f"run not done in time: {last}")


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 20) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the example exited"
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"nothing listens on {port}")


def test_client_usage(cronman, tmp_path):
    proc = example("client_usage.py", {"CRONMAN_URL": cronman}, tmp_path,
                   "http://127.0.0.1:9/hook")
    assert proc.wait(60) == 0, (tmp_path / "client_usage.py.log").read_text()
    report = json.loads((tmp_path / "client_usage.py.log").read_text().splitlines()[-1])
    assert report["conflict"].startswith("conflict:") and report["conflict"].endswith("(name)")
    assert len(report["next"]) == 3 and report["priority"] == 5
    assert report["stale_update"] == "refused" and report["listed"] is True
    assert report["runs"] == [report["triggered"]]
    with CronmanClient(cronman) as api:
        assert list(api.iter_jobs(namespace="examples")) == []


def test_the_apply_definitions(cronman):
    runner = CliRunner()
    env = {"CRONMAN_URL": cronman}
    res = runner.invoke(cli, ["jobs", "apply", "-f", str(EXAMPLES / "jobs")], env=env)
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines()[-1] == "3 created, 0 updated, 0 deleted, 0 unchanged"
    res = runner.invoke(cli, ["jobs", "apply", "-f", str(EXAMPLES / "jobs")], env=env)
    assert res.stdout.strip() == "no changes: 3 jobs unchanged"


def test_flask_receiver_with_redis_deduplication(cronman, tmp_path, redis_url):
    import redis

    port = free_port()
    output = tmp_path / "handled.jsonl"
    # The key a namespace's receiver holds: its own, never the cluster secret.
    key = namespace_key(SECRET, "examples")
    proc = example("receiver_flask.py", {"CRONMAN_SIGNING_KEY": key, "PORT": str(port),
                                         "OUTPUT": str(output), "REDIS_URL": redis_url},
                   tmp_path)
    try:
        wait_port(port, proc)
        with CronmanClient(cronman) as api:
            job = api.create_job({"name": "flask", "namespace": "examples",
                                  "schedule": {"kind": "once", "at": soon()},
                                  "target": {"kind": "http", "body": "hi",
                                             "url": f"http://127.0.0.1:{port}/hook"}})
            run = wait_run(api, job["id"], lambda r: r["status"] == "succeeded")
            assert run["result"]["http_status"] == 204
            api.replay_run(run["id"])
            again = wait_run(api, job["id"], lambda r: r["attempt"] == 2
                             and r["status"] == "succeeded")
            assert again["result"]["http_status"] == 200  # the duplicate, not handled
        handled = [json.loads(line) for line in output.read_text().splitlines()]
        assert [h["run_id"] for h in handled] == [run["id"]] and handled[0]["body"] == "hi"
        store = redis.Redis.from_url(redis_url)
        assert store.get(f"cronman:receiver:run:{run['id']}") == b"done"
        store.delete(f"cronman:receiver:run:{run['id']}")
    finally:
        proc.terminate()
        proc.wait(10)


def _post(url: str, body: bytes, headers: dict[str, str]) -> int:
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.parametrize("name", ["receiver_wsgi.py", "receiver_flask.py"])
def test_a_receiver_example_checks_its_own_url_not_the_host_header(name, tmp_path):
    """A callback captured at another receiver of the namespace (same key, another URL),
    replayed here with that receiver's ``Host``, is refused: the example checks the URL
    its jobs call (by default http://127.0.0.1:PORT/hook), whatever the request says."""
    port = free_port()
    key = namespace_key(SECRET, "examples")
    proc = example(name, {"CRONMAN_SIGNING_KEY": key, "PORT": str(port),
                          "OUTPUT": str(tmp_path / "out.jsonl")}, tmp_path)
    try:
        wait_port(port, proc)
        body = b'{"event":"payment.approved"}'
        here = f"http://127.0.0.1:{port}/hook"

        def signed(url: str, run_id: str) -> dict[str, str]:
            ctx = {"job_id": "j", "run_id": run_id, "scheduled_for": "2026-01-01T00:00:00Z"}
            return {"Cronman-Job-Id": "j", "Cronman-Run-Id": run_id,
                    "Cronman-Scheduled-For": ctx["scheduled_for"], "Cronman-Attempt": "1",
                    "Cronman-Signature": sign(key, int(time.time()), url=url, body=body, **ctx)}

        replay = {**signed("http://low.example/hook", "r1"), "Host": "low.example"}
        assert _post(here, body, replay) == 401
        assert _post(here, body, signed(here, "r2")) == 204
        handled = [json.loads(line)["run_id"]
                   for line in (tmp_path / "out.jsonl").read_text().splitlines()]
        assert handled == ["r2"]
    finally:
        proc.terminate()
        proc.wait(10)


def test_sqs_consumer_checks_attributes_and_deduplicates(cronman, tmp_path):
    import boto3

    with moto_server() as moto:
        sqs = boto3.client("sqs", region_name="us-east-1", endpoint_url=moto.endpoint_url,
                           aws_access_key_id="testing", aws_secret_access_key="testing")
        queue = sqs.create_queue(QueueName="cronman-examples")["QueueUrl"]
        # A message that is not cronman's is left alone.
        sqs.send_message(QueueUrl=queue, MessageBody="not ours")
        output = tmp_path / "consumed.jsonl"
        consumer = example("sqs_consumer.py", {**AWS_TEST_ENV, "QUEUE_URL": queue,
                                               "AWS_ENDPOINT_URL_SQS": moto.endpoint_url,
                                               "OUTPUT": str(output), "IDLE_EXIT": "6"},
                           tmp_path)
        with CronmanClient(cronman) as api:
            job = api.create_job({"name": "sqs", "namespace": "examples",
                                  "schedule": {"kind": "once", "at": soon()},
                                  "target": {"kind": "sqs", "queue_url": queue,
                                             "region": "us-east-1", "body": '{"n":1}',
                                             "endpoint_url": moto.endpoint_url}})
            run = wait_run(api, job["id"], lambda r: r["status"] == "succeeded")
            api.replay_run(run["id"])  # the same run sent again
            wait_run(api, job["id"], lambda r: r["attempt"] == 2 and r["status"] == "succeeded")
        assert consumer.wait(90) == 0
        log = (tmp_path / "sqs_consumer.py.log").read_text()
        handled = [json.loads(line) for line in output.read_text().splitlines()]
        assert [h["run_id"] for h in handled] == [run["id"]] and handled[0]["body"] == '{"n":1}'
        assert f"duplicate of run {run['id']}: deleted" in log
        assert "not a cronman message (missing message attribute" in log
