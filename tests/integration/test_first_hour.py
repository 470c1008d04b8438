"""A new user's first hour, as the README gives it, on installs made the user's way:

- a fresh copy of the repository where ``ops/standalone`` builds ``.venv`` from
  ``requirements.txt`` alone (no dev requirements) and starts the service; a job
  made through the API fires at the project's own receiver, run from that venv;
- every ```` ```sh ```` block of the README, run in order in one shell against it
  (the few that cannot run in a test are listed in ``NOT_RUN``, with why);
- ``pip install <repo>`` (the light side) and then the hint a server command
  prints, followed as printed: ``cronman standalone`` from that venv serves /healthz.

The venvs are built once per module; pip's cache makes them quick.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.api import REPO, free_port
from tests.support.processes import READY_LINE
from tests.support.repo_copy import repo_copy

# Under `--dist loadgroup` the tests of one venv stay on one worker (built once) and
# the two venvs are built side by side.
pytestmark = pytest.mark.slow
FRESH_COPY = pytest.mark.xdist_group("first-hour-fresh-copy")
SERVER_EXTRA = pytest.mark.xdist_group("first-hour-server-extra")

README = REPO / "README.md"
# The Quick start's secret: the standalone fixture starts with it, as the README does.
QUICK_START_SECRET = "change-me"
# The README's addresses, swapped for free ports in the blocks the test runs.
API_ADDRESS, RECEIVER_ADDRESS = "127.0.0.1:8080", "127.0.0.1:9000"
# README shell blocks that are not run here, by their first line, and why.
NOT_RUN = {
    "export CRONMAN_SIGNING_SECRET": "starts the service (ops/standalone): the fixture does, "
                                     "in a fresh copy, with that secret",
    "ops/test": "the test suite itself",
    "pip install": "installs into the reader's environment: the venv tests below do it",
    "export CRONMAN_DATABASE_URL=postgresql": "a production cluster on PostgreSQL and Redis "
                                              "that runs until stopped (tests/cluster/)",
    "export CRONMAN_AUDIT_URL=s3": "needs wal_level=logical and a bucket "
                                   "(tests/integration/test_audit_export.py)",
    "apt-get install": "installs Debian packages and needs containerd (tests/agent/)",
}


def readme_blocks() -> list[str]:
    """The README's ```sh blocks, in order."""
    return re.findall(r"^```sh\n(.*?)^```$", README.read_text(), flags=re.S | re.M)


def not_run_reason(block: str) -> str | None:
    first = block.lstrip().splitlines()[0]
    return next((why for start, why in NOT_RUN.items() if first.startswith(start)), None)


def user_env(**extra: str) -> dict[str, str]:
    """Our environment as a user's shell has it: no CRONMAN_* or PYTHON* settings,
    no virtualenv, not this test run's venv on PATH."""
    ours = str(Path(sys.prefix) / "bin")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CRONMAN_", "PYTHON", "VIRTUAL_ENV"))}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p and p != ours)
    env.update(extra)
    return env


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1.0) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def wait_for(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float) -> float:
    started = time.monotonic()
    while not answers(url):
        if proc.poll() is not None:
            raise AssertionError(f"exited ({proc.returncode}):\n{log.read_text()[-4000:]}")
        if time.monotonic() - started > timeout:
            raise AssertionError(f"no answer from {url} in {timeout} s:\n"
                                 f"{log.read_text()[-4000:]}")
        time.sleep(0.2)
    return time.monotonic() - started


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


class Standalone:
    def __init__(self, clone: Path, port: int, log: Path) -> None:
        self.clone, self.port, self.log = clone, port, log
        self.url = f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def standalone(tmp_path_factory) -> Iterator[Standalone]:
    """``ops/standalone`` in a fresh copy: .venv from requirements.txt alone."""
    clone = repo_copy(tmp_path_factory.mktemp("fresh") / "cronman")
    port = free_port()
    log = clone.parent / "standalone.log"
    proc = subprocess.Popen(["ops/standalone", "--bind", f"127.0.0.1:{port}"], cwd=clone,
                            env=user_env(CRONMAN_SIGNING_SECRET=QUICK_START_SECRET),
                            stdout=open(log, "wb"), stderr=subprocess.STDOUT,  # noqa: SIM115
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(f"http://127.0.0.1:{port}/healthz", proc, log, timeout=600)
        deadline = time.monotonic() + 30
        while READY_LINE not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-4000:]
            time.sleep(0.1)
        yield Standalone(clone, port, log)
    finally:
        stop(proc)


def api(url: str, method: str = "GET", body: object = None) -> dict[str, object]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read() or b"{}")  # type: ignore[no-any-return]


@FRESH_COPY
def test_ops_standalone_on_a_fresh_copy_fires_a_job_at_the_example_receiver(standalone):
    clone = standalone.clone
    venv_bin = clone / ".venv" / "bin"
    # Only the pinned runtime set: nothing of requirements-dev.txt.
    listed = subprocess.run([str(venv_bin / "python"), "-m", "pip", "list", "--format=json"],
                            capture_output=True, text=True, check=True, env=user_env())
    installed = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert "flask" in installed and "duckdb" in installed
    assert not installed & {"pytest", "aiohttp", "mypy", "fakeredis", "playwright"}
    log = standalone.log.read_text()
    assert "clock reference: this host's clock (in-process coordinator, no Redis)" in log
    assert "clock reference: redis" not in log

    # The receiver holds the namespace's key, read as the Quick start reads it.
    shown = subprocess.run([str(venv_bin / "cronman"), "signing-key", "show", "first-hour", "-q"],
                           capture_output=True, text=True, timeout=30,
                           env=user_env(CRONMAN_URL=standalone.url))
    assert shown.returncode == 0 and len(shown.stdout.strip()) == 64, shown
    port = free_port()
    output = clone.parent / "handled.jsonl"
    receiver_log = clone.parent / "receiver.log"
    receiver = subprocess.Popen(
        [str(venv_bin / "python"), "examples/receiver_wsgi.py"], cwd=clone,
        env=user_env(CRONMAN_SIGNING_KEY=shown.stdout.strip(), PORT=str(port),
                     OUTPUT=str(output)),
        stdout=open(receiver_log, "wb"), stderr=subprocess.STDOUT)  # noqa: SIM115
    try:
        deadline = time.monotonic() + 20
        while b"listening" not in receiver_log.read_bytes():
            assert receiver.poll() is None and time.monotonic() < deadline, \
                receiver_log.read_text()
            time.sleep(0.1)
        job = api(f"{standalone.url}/v1/jobs", "POST", {
            "name": "fresh-clone", "namespace": "first-hour",
            "schedule": {"kind": "interval", "every": 2},
            "target": {"kind": "http", "url": f"http://127.0.0.1:{port}/hook",
                       "body": "from a fresh clone"}})
        deadline = time.monotonic() + 30
        while not (output.exists() and output.read_text().strip()):
            assert time.monotonic() < deadline, "no callback arrived"
            time.sleep(0.2)
        handled = json.loads(output.read_text().splitlines()[0])
        assert handled["job_id"] == job["id"] and handled["body"] == "from a fresh clone"
        # The run's outcome is written a moment after the answer.
        deadline = time.monotonic() + 20
        while not any(r["status"] == "succeeded" and r["result"]["http_status"] == 204
                      for r in api(f"{standalone.url}/v1/jobs/{job['id']}/runs")["items"]):
            assert time.monotonic() < deadline, "the run is not recorded succeeded"
            time.sleep(0.2)
        api(f"{standalone.url}/v1/jobs/{job['id']}", "DELETE")
    finally:
        stop(receiver)


@FRESH_COPY
def test_every_readme_shell_block_runs(standalone, tmp_path):
    blocks = readme_blocks()
    assert blocks, "no ```sh block in the README"
    run = [b for b in blocks if not_run_reason(b) is None]
    # Each exception still matches a block: the list does not outlive the README.
    for start in NOT_RUN:
        assert any(b.lstrip().startswith(start) for b in blocks), f"no block starts {start!r}"
    receiver_port = free_port()
    script = "\n".join(b.replace(API_ADDRESS, f"127.0.0.1:{standalone.port}")
                       .replace(RECEIVER_ADDRESS, f"127.0.0.1:{receiver_port}")
                       for b in run)
    # One shell, as a reader's terminal: exports carry over; what it started in
    # the background is stopped at the end. Last, the Quick start job's runs.
    runs_file = tmp_path / "quick-start-runs.json"
    full = ("set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n"
            f"{script}\ncronman jobs runs \"$id\" -o json > {runs_file}\n")
    (tmp_path / "readme.sh").write_text(full)
    out = subprocess.run(["bash", str(tmp_path / "readme.sh")], cwd=standalone.clone,
                         capture_output=True, text=True, timeout=300,
                         env=user_env(PORT=str(receiver_port),
                                      CRONMAN_URL=f"http://127.0.0.1:{standalone.port}"))
    (tmp_path / "readme.out").write_text(out.stdout + "\n--- stderr\n" + out.stderr)
    assert out.returncode == 0, f"stdout:\n{out.stdout[-6000:]}\nstderr:\n{out.stderr[-6000:]}"
    # The Quick start's job fired at the example receiver, which answered 204.
    runs = json.loads(runs_file.read_text())["items"]
    assert any(r["status"] == "succeeded" and r["result"]["http_status"] == 204 for r in runs)
    # The audit queries ran (DuckDB parsed and bound them): each printed its header.
    assert "at,action,job_id,job_name,request_id" in out.stdout


@pytest.fixture(scope="module")
def server_venv(tmp_path_factory) -> tuple[Path, str]:
    """`pip install <repo>` (the light side), then the hint a server command prints,
    followed as it is printed, with that venv's pip."""
    venv = tmp_path_factory.mktemp("server") / "venv"
    source = repo_copy(venv.parent / "source")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    bin_ = venv / "bin"
    env = user_env(PATH=f"{bin_}{os.pathsep}{user_env()['PATH']}")
    pip = [str(bin_ / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, str(source)], check=True, timeout=600, cwd=venv.parent, env=env)
    refused = subprocess.run([str(bin_ / "cronman"), "standalone"], capture_output=True,
                             text=True, timeout=60, cwd=venv.parent, env=env)
    assert refused.returncode == 1, refused.stderr
    hint = re.search(r"Install it with: (.+)$", refused.stderr, flags=re.M)
    assert hint, refused.stderr
    followed = subprocess.run(["bash", "-c", hint.group(1)], capture_output=True, text=True,
                              timeout=900, cwd=venv.parent, env=env)
    assert followed.returncode == 0, followed.stdout + followed.stderr
    return bin_, hint.group(1)


@SERVER_EXTRA
def test_the_server_hint_followed_makes_a_server_that_starts(server_venv, tmp_path):
    bin_, hint = server_venv
    assert hint == "pip install 'cronman[server]'"
    env = user_env(PATH=f"{bin_}{os.pathsep}{user_env()['PATH']}")
    listed = subprocess.run([str(bin_ / "python"), "-m", "pip", "list", "--format=json"],
                            capture_output=True, text=True, check=True, env=env)
    installed = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert {"flask", "sqlalchemy", "gunicorn", "duckdb"} <= installed
    assert "aiohttp" not in installed and "pytest" not in installed
    port = free_port()
    log = tmp_path / "standalone.log"
    proc = subprocess.Popen([str(bin_ / "cronman"), "standalone", "--bind", f"127.0.0.1:{port}",
                             "--database-url", f"sqlite:///{tmp_path / 'cronman.db'}"],
                            cwd=tmp_path, env=env, stdout=open(log, "wb"),  # noqa: SIM115
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_for(f"http://127.0.0.1:{port}/healthz", proc, log, timeout=60)
        assert answers(f"http://127.0.0.1:{port}/openapi.json")
    finally:
        stop(proc)
