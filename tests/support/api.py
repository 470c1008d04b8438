"""Helpers for the API tests: job specs, and a real `cronman api` server on a free port."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
# The `cronman` command, run with this interpreter.
CRONMAN = [sys.executable, "-c", "from cronman.cli import main; main()"]


def job_spec(name: str = "digest", **overrides: Any) -> dict[str, Any]:
    """A valid job definition (cron, every day at 07:00 Berlin time)."""
    spec: dict[str, Any] = {
        "name": name,
        "schedule": {"kind": "cron", "cron": "0 7 * * *", "timezone": "Europe/Berlin"},
        "target": {"kind": "http", "url": "https://hooks.example.com/digest",
                   "headers": {"Authorization": "Bearer abcdefghijklmnop", "X-Short": "k"}},
    }
    spec.update(overrides)
    return spec


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method: str, url: str, body: Any = None, token: str | None = None,
         timeout: float = 10.0) -> tuple[int, Any, dict[str, str]]:
    """(status, decoded JSON or text, headers) of one request; never raises for HTTP errors."""
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"} if data is not None else {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, raw, hdrs = resp.status, resp.read(), dict(resp.headers)
    except urllib.error.HTTPError as exc:
        status, raw, hdrs = exc.code, exc.read(), dict(exc.headers)
    text = raw.decode()
    try:
        return status, json.loads(text) if text.strip() else None, hdrs
    except ValueError:
        return status, text, hdrs


@contextmanager
def running_api(database_url: str, *, workers: int = 1, threads: int = 4,
                extra_env: dict[str, str] | None = None,
                startup_timeout: float = 30.0, log_path: Path | None = None,
                extra_args: tuple[str, ...] = ()) -> Iterator[str]:
    """`cronman api` on a free loopback port; yields its base URL; stops it by PID.

    Its output goes to ``log_path`` when given (complete once the block ends);
    ``extra_args`` go on its command line (``--access-log``).
    """
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONMAN_")}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    env.update({"CRONMAN_DATABASE_URL": database_url, **(extra_env or {})})
    cmd = [*CRONMAN, "api", "--bind", f"127.0.0.1:{port}",
           "--workers", str(workers), "--threads", str(threads), *extra_args]
    sink = open(log_path, "wb") if log_path is not None else None  # noqa: SIM115
    proc = subprocess.Popen(cmd, env=env, cwd=REPO,
                            stdout=sink if sink is not None else subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_timeout
        while True:
            if proc.poll() is not None:
                out = (proc.stdout.read().decode() if proc.stdout
                       else log_path.read_text() if log_path else "")
                raise RuntimeError(f"cronman api exited with {proc.returncode}:\n{out}")
            try:
                status, _, _ = http("GET", base + "/healthz", timeout=1.0)
                if status == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("cronman api did not answer /healthz in time")
            time.sleep(0.1)
        yield base
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        if proc.stdout:
            proc.stdout.close()
        if sink is not None:
            sink.close()
