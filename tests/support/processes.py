"""Real cronman processes for tests: scheduler nodes and standalone.

Each process gets its own environment (only the CRONMAN_* variables given,
on top of a clean copy of ours), its output captured to a log file, and is
stopped by PID: SIGTERM (graceful, waited for) or SIGKILL. ``Processes`` is a
context manager that kills whatever is still running at the end of a test.

    with Processes(tmp_path) as procs:
        node = procs.scheduler(database_url, "n1", env={"CRONMAN_LEASE_SECONDS": "3"})
        ...
        node.kill()
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

CRONMAN = [sys.executable, "-c", "from cronman.cli import main; main()"]
READY_LINE = "ready: owns"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Our environment without CRONMAN_* settings, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONMAN_")}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


class CronmanProcess:
    """One running cronman command with its log file."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_path: Path) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 (closed in wait)
        self.proc = subprocess.Popen(argv, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        self.started = time.monotonic()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def running(self) -> bool:
        return self.proc.poll() is None

    def wait_until(self, check: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return
            if not self.running():
                raise AssertionError(f"{self.name} exited ({self.proc.returncode}) while "
                                     f"waiting for {what}:\n{self.log_text()[-4000:]}")
            time.sleep(0.05)
        raise AssertionError(f"{self.name}: no {what} within {timeout} s:\n"
                             f"{self.log_text()[-4000:]}")

    def wait_for_log(self, text: str, timeout: float = 20.0, count: int = 1) -> None:
        self.wait_until(lambda: self.log_text().count(text) >= count, timeout, repr(text))

    def terminate(self) -> None:
        if self.running():
            self.proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL, and wait for the process to be gone."""
        if self.running():
            self.proc.send_signal(signal.SIGKILL)
        self.wait(5.0)

    def kill_with_children(self) -> None:
        """SIGKILL the process and its children at once (a gunicorn master and its
        workers: a worker outlives its master's SIGKILL until it notices), as an
        out-of-memory kill or a lost host ends them."""
        children = self.children()
        self.kill()
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def children(self) -> list[int]:
        pids: list[int] = []
        for task in Path(f"/proc/{self.pid}/task").glob("*"):
            with contextlib.suppress(OSError):
                pids += [int(p) for p in (task / "children").read_text().split()]
        return pids

    def wait(self, timeout: float) -> int:
        try:
            rc = self.proc.wait(timeout)
        finally:
            if self.proc.returncode is not None and not self._log.closed:
                self._log.close()
        return rc

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM and wait; SIGKILL if it does not exit in time. Returns the exit code."""
        self.terminate()
        try:
            return self.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.name} did not exit within {timeout} s of SIGTERM:\n"
                                 f"{self.log_text()[-4000:]}") from None


class Processes:
    """Starts cronman processes for one test and kills leftovers at the end."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = Path(log_dir)
        self.started: list[CronmanProcess] = []

    def __enter__(self) -> Processes:
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self.started:
            if p.running():
                p.kill()

    def start(self, name: str, args: list[str], env: Mapping[str, str] | None = None,
              prefix: Sequence[str] = ()) -> CronmanProcess:
        """``cronman ARGS``; ``prefix`` runs it through a command that execs it
        (``ip netns exec NS``: the PID stays the cronman process's)."""
        log_path = self.log_dir / f"{name}-{len(self.started)}.log"
        p = CronmanProcess(name, [*prefix, *CRONMAN, *args], clean_env(env), log_path)
        self.started.append(p)
        return p

    def scheduler(self, database_url: str, node_id: str, *, redis_url: str | None = None,
                  env: Mapping[str, str] | None = None, wait: bool = True,
                  ready_count: int = 1, extra_args: Sequence[str] = ()) -> CronmanProcess:
        """``cronman scheduler`` on ``database_url``; waits for its ready line."""
        full = {"CRONMAN_ALLOW_PRIVATE_TARGETS": "true"}
        full.update(env or {})
        args = ["scheduler", "--node-id", node_id, "--database-url", database_url,
                *extra_args]
        if redis_url:
            args += ["--redis-url", redis_url]
        p = self.start(node_id, args, full)
        if wait:
            p.wait_for_log(READY_LINE, count=ready_count)
        return p

    def agent(self, agent_id: str, *, redis_url: str, runtime: str = "containerd",
              env: Mapping[str, str] | None = None, wait: bool = True) -> CronmanProcess:
        """``cronman agent``; waits for its ready line."""
        args = ["agent", "--runtime", runtime, "--agent-id", agent_id, "--redis-url", redis_url]
        p = self.start(agent_id, args, env)
        if wait:
            p.wait_for_log(f"agent {agent_id} ready")
        return p

    def standalone(self, database_url: str, port: int | None = None,
                   env: Mapping[str, str] | None = None, wait: bool = True) -> CronmanProcess:
        """``cronman standalone`` on a free port; waits until /healthz answers
        and the node is ready. The URL is in ``.url``."""
        port = port or free_port()
        p = self.start("standalone", ["standalone", "--database-url", database_url,
                                      "--bind", f"127.0.0.1:{port}"], env)
        p.url = f"http://127.0.0.1:{port}"  # type: ignore[attr-defined]
        if wait:
            p.wait_until(lambda: _answers(f"http://127.0.0.1:{port}/healthz"), 30.0,
                         "an answer on /healthz")
            p.wait_for_log(READY_LINE)
        return p


def processes_with(argv: Sequence[str]) -> list[int]:
    """PIDs of the processes whose command line is exactly ``argv`` (a run's
    command started by an agent, found by a unique argument)."""
    want = "\0".join(argv) + "\0"
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "cmdline").read_text() == want:
                found.append(int(entry.name))
        except OSError:  # gone meanwhile
            continue
    return found


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1.0) as resp:
            return resp.status == 200
    except OSError:
        return False
