"""`pip install cronman` alone (no server extra) in a fresh venv: no server dependency is
present, the CLI starts and names the extra (and only what the extra installs), the
Python client example runs, and the receiver example verifies and deduplicates real
callbacks from a running cronman (standalone). Following the hint is tested in
test_first_hour.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from cronman.signing import namespace_key, sign
from tests.support.api import REPO, free_port
from tests.support.processes import Processes
from tests.support.repo_copy import repo_copy
from tests.support.work_queue_server import work_queue_server

pytestmark = pytest.mark.slow

SERVER_MODULES = ("flask", "werkzeug", "sqlalchemy", "alembic", "aiohttp", "psycopg2", "boto3",
                  "botocore", "redis", "gunicorn", "prometheus_client")
SECRET = "light-secret"
# What `pip install 'cronman[server]'` adds, by distribution name.
SERVER_EXTRA = [line.split("==")[0] for line in
                (REPO / "requirements-server.txt").read_text().splitlines()
                if line and not line.startswith("#")]


@pytest.fixture(scope="module")
def light(tmp_path_factory) -> Path:
    """A fresh venv holding `pip install <repo>` and nothing else; its bin folder."""
    venv = tmp_path_factory.mktemp("light") / "venv"
    source = repo_copy(venv.parent / "source")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
           "--disable-pip-version-check"]
    subprocess.run([*pip, str(source)], check=True, timeout=600, cwd=venv.parent)
    return venv / "bin"


def light_run(light: Path, *args: str, env: dict[str, str] | None = None,
              timeout: float = 60) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("CRONMAN_", "PYTHON"))}
    full.update(env or {})
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout,
                          env=full, cwd=light.parent.parent)  # not the repo: no stray imports


def test_no_server_dependency_is_installed_or_imported(light):
    probe = (
        "import importlib.util, json, sys\n"
        f"mods = {SERVER_MODULES!r}\n"
        "present = [m for m in mods if importlib.util.find_spec(m) is not None]\n"
        "import cronman, cronman.client, cronman.receiver, cronman.cli, cronman.apply.normalize\n"
        "import cronman.client.worker, cronman.client.command, cronman.cli.worker\n"
        "loaded = sorted({m.split('.')[0] for m in sys.modules} & set(mods))\n"
        "print(json.dumps({'present': present, 'loaded': loaded, 'file': cronman.__file__}))\n")
    out = light_run(light, str(light / "python"), "-c", probe)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["present"] == [] and report["loaded"] == []
    assert str(light.parent) in report["file"]  # the installed copy, not the repo


def test_the_cli_starts_and_server_commands_name_the_extra(light):
    out = light_run(light, str(light / "cronman"), "--help")
    assert out.returncode == 0 and "jobs" in out.stdout and "[server]" in out.stdout
    for command in (["api", "--bind", "127.0.0.1:1"], ["scheduler"], ["standalone"],
                    ["migrate"], ["bench"], ["tokens", "list"]):
        out = light_run(light, str(light / "cronman"), *command)
        assert out.returncode == 1, (command, out.stderr)
        assert "pip install 'cronman[server]'" in out.stderr and "SQLAlchemy" in out.stderr
        # It asks only for what the server extra installs (once it asked for aiohttp).
        missing = out.stderr.split("(missing: ", 1)[1].split(")", 1)[0].split(", ")
        assert set(missing) == set(SERVER_EXTRA) and "aiohttp" not in out.stderr
    # Tokens through the API are a client command; the database side names the extra.
    out = light_run(light, str(light / "cronman"), "tokens", "--help")
    assert out.returncode == 0 and "api" in out.stdout and "[server]" in out.stdout
    out = light_run(light, str(light / "cronman"), "tokens", "api", "list", "--help")
    assert out.returncode == 0 and "--url" in out.stdout


def test_the_python_client_example_runs_from_the_light_install(light, tmp_path):
    with Processes(tmp_path) as procs:
        node = procs.standalone(f"sqlite:///{tmp_path / 'cronman.db'}")
        out = light_run(light, str(light / "python"), str(REPO / "examples" / "client_usage.py"),
                        "http://127.0.0.1:9/hook", env={"CRONMAN_URL": node.url},  # type: ignore[attr-defined]
                        timeout=120)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.splitlines()[-1])
    assert report["stale_update"] == "refused" and report["listed"] is True
    assert report["runs"] == [report["triggered"]]


def test_the_worker_command_runs_commands_from_the_light_install(light, tmp_path):
    """`cronman worker` of the light install against a server speaking the worker calls'
    wire contract (the end-to-end tests run it on the real API)."""
    with work_queue_server(token="t") as server:
        item = server.enqueue({"light": True}, heartbeat_timeout=2.0)
        full = {k: v for k, v in os.environ.items() if not k.startswith(("CRONMAN_", "PYTHON"))}
        worker = subprocess.Popen(
            [str(light / "cronman"), "worker", "--queue", "q", "--url", server.url,
             "--token", "t", "--wait", "1", "--", "sh", "-c", "cat; echo; echo done >&2"],
            env=full, cwd=light.parent.parent, stdout=subprocess.DEVNULL,
            stderr=open(tmp_path / "worker.log", "wb"))  # noqa: SIM115
        try:
            server.wait_for(lambda: item.status == "succeeded", 60)
        finally:
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(20) == 0
    assert item.result["logs_tail"] == {"stdout": '{"light": true}\n', "stderr": "done\n"}
    assert "started" in (tmp_path / "worker.log").read_text()


def post(url: str, body: bytes, headers: dict[str, str]) -> int:
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_the_receiver_verifies_and_deduplicates_real_callbacks(light, tmp_path):
    output = tmp_path / "handled.jsonl"
    port = free_port()
    receiver: subprocess.Popen[bytes] | None = None
    try:
        with Processes(tmp_path) as procs:
            db = f"sqlite:///{tmp_path / 'cronman.db'}"
            node = procs.standalone(db, env={"CRONMAN_SIGNING_SECRET": SECRET})
            api = node.url  # type: ignore[attr-defined]
            # The receiver holds its namespace's key, read from the API.
            with urllib.request.urlopen(f"{api}/v1/namespaces/light/signing-key") as resp:
                key = json.load(resp)["keys"][0]["key"]
            receiver = subprocess.Popen(
                [str(light / "python"), str(REPO / "examples" / "receiver_wsgi.py")],
                env={"PATH": os.environ["PATH"], "CRONMAN_SIGNING_KEY": key, "PORT": str(port),
                     "OUTPUT": str(output), "FAIL_FIRST": "1"},
                stderr=open(tmp_path / "receiver.log", "wb"), cwd=tmp_path)  # noqa: SIM115
            _wait_for_port(port)

            # A forged, another namespace's, a replayed (stale) request are refused.
            body = b'{"x":1}'
            base = {"Cronman-Job-Id": "j", "Cronman-Run-Id": "forged",
                    "Cronman-Scheduled-For": "2026-01-01T00:00:00Z", "Cronman-Attempt": "1"}
            url = f"http://127.0.0.1:{port}/hook"
            context = {"job_id": "j", "run_id": "forged",
                       "scheduled_for": "2026-01-01T00:00:00Z", "url": url, "body": body}
            for signing_key, t in (("wrong", time.time()),
                                   (namespace_key(SECRET, "other"), time.time()),
                                   (SECRET, time.time()),  # the cluster secret never signs
                                   (key, time.time() - 600)):
                header = sign(signing_key, int(t), **context)
                assert post(url, body, {**base, "Cronman-Signature": header}) == 401
            # Signed with its key: verified and handed to the app (which fails attempt 1).
            assert post(url, body, {**base, "Cronman-Signature": sign(key, int(time.time()),
                                                                      **context)}) == 500

            # The job is made with the light install's own CLI (apply).
            # Far enough ahead that a slow CLI start on a loaded machine is not "in the past".
            at = (datetime.now(UTC) + timedelta(seconds=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
            spec = {"name": "light-once", "namespace": "light",
                    "schedule": {"kind": "once", "at": at},
                    "target": {"kind": "http", "url": url, "body": '{"hello":"light"}'},
                    "retry": {"max_attempts": 3, "min_backoff": 1, "max_backoff": 1}}
            (tmp_path / "jobs").mkdir()
            (tmp_path / "jobs" / "once.yaml").write_text(yaml.safe_dump(spec))
            cli = [str(light / "cronman")]
            env = {"CRONMAN_URL": api}
            out = light_run(light, *cli, "jobs", "apply", "-f", str(tmp_path / "jobs"), env=env)
            assert out.returncode == 0 and "created light/light-once" in out.stdout, out.stderr
            out = light_run(light, *cli, "jobs", "list", "-n", "light", "-o", "json", env=env)
            job_id = json.loads(out.stdout)["items"][0]["id"]

            # Attempt 1 is answered 500 (the example's FAIL_FIRST): released, so attempt 2
            # is handled; the run succeeds with one handling.
            run = _wait_run(light, env, job_id, lambda r: r["status"] == "succeeded", timeout=45)
            assert run["attempt"] == 2
            # A replay sends the same run again: a duplicate, answered 200, not handled.
            out = light_run(light, *cli, "runs", "replay", run["id"], "-o", "json", env=env)
            assert out.returncode == 0, out.stderr
            again = _wait_run(light, env, job_id,
                              lambda r: r["attempt"] == 3 and r["status"] == "succeeded")
            assert again["id"] == run["id"] and again["result"]["http_status"] == 200
            handled = [json.loads(line) for line in output.read_text().splitlines()]
            assert [h["run_id"] for h in handled] == [run["id"]]
            assert handled[0]["attempt"] == 2 and handled[0]["body"] == '{"hello":"light"}'
    finally:
        if receiver is not None:
            receiver.send_signal(signal.SIGTERM)
            receiver.wait(10)


def _wait_for_port(port: int, timeout: float = 20) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"nothing listens on {port}")


def _wait_run(light, env, job_id, done, timeout=30.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        out = light_run(light, str(light / "cronman"), "jobs", "runs", job_id, "-o", "json",
                        env=env)
        items = json.loads(out.stdout)["items"] if out.returncode == 0 else []
        if items:
            last = items[0]
            if done(last):
                return last
        time.sleep(0.3)
    raise AssertionError(f"run not done in time: {last}")
