"""Processes the benchmark starts: launching, stopping by PID, and their cost.

Everything here acts only on processes this module started (by PID), never by
name. CPU time and peak RSS come from ``/proc/<pid>/stat`` and
``/proc/<pid>/status`` (VmHWM); they are sampled while the process lives,
because the numbers vanish with it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

_CLK_TCK = os.sysconf("SC_CLK_TCK")
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child, before exec: get SIGTERM if the benchmark itself dies, so
    a killed benchmark leaves no scheduler, redis-server or nginx behind."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


class BenchError(RuntimeError):
    """The benchmark could not set up or run a part of itself."""


def cronman_command() -> list[str]:
    """How to run the ``cronman`` command of this Python environment."""
    exe = Path(sys.executable).with_name("cronman")
    if exe.exists():
        return [str(exe)]
    return [sys.executable, "-c", "from cronman.cli import main; main()"]


@dataclass(frozen=True, slots=True)
class Usage:
    """Cumulative CPU seconds (user + system) and peak RSS of one process."""

    cpu_s: float
    peak_rss_kb: int


def read_usage(pid: int) -> Usage | None:
    """The process's CPU seconds and VmHWM, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            stat = fh.read()
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            status = fh.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) may hold spaces: split after its closing paren.
    fields = stat[stat.rindex(")") + 2:].split()
    if fields[0] == "Z":
        return None
    utime, stime = int(fields[11]), int(fields[12])
    hwm = 0
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            hwm = int(line.split()[1])
            break
    return Usage(cpu_s=(utime + stime) / _CLK_TCK, peak_rss_kb=hwm)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the caller retries on a race)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def wait_port(host: str, port: int, timeout: float, proc: ManagedProcess | None = None) -> None:
    """Wait until something accepts connections on host:port."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            pass
        if proc is not None and proc.exited():
            raise BenchError(f"{proc.name} exited with {proc.returncode}: {proc.log_tail()}")
        if time.monotonic() > deadline:
            raise BenchError(f"nothing listens on {host}:{port} after {timeout:.0f} s")
        time.sleep(0.05)


class ManagedProcess:
    """A child process with its output in a log file, its usage sampled.

    ``sample()`` records the latest CPU seconds and peak RSS, so the figures
    survive a SIGKILL; ``usage`` is the last sample taken.
    """

    def __init__(self, name: str, argv: Sequence[str], *, log_path: Path,
                 env: Mapping[str, str] | None = None, cwd: Path | None = None,
                 inherit_env: bool = False) -> None:
        """``env`` replaces the environment, or adds to this process's with ``inherit_env``."""
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.log_offset = self._log.tell()  # where this process's own lines begin
        if env is not None and inherit_env:
            env = {**os.environ, **env}
        self.popen = subprocess.Popen(
            self.argv, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=dict(env) if env is not None else None, cwd=cwd, start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        self.pid = self.popen.pid
        self.started_at = time.time()
        self.usage: Usage | None = None
        self.killed_at: float | None = None

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    def exited(self) -> bool:
        return self.popen.poll() is not None

    def sample(self) -> Usage | None:
        if self.exited():
            return self.usage
        u = read_usage(self.pid)
        if u is not None:
            self.usage = u
        return self.usage

    def kill(self) -> None:
        """SIGKILL now (a crash, for the kill scenario)."""
        self.sample()
        if not self.exited():
            os.kill(self.pid, signal.SIGKILL)
            self.killed_at = time.time()
        self.popen.wait(timeout=10)

    def stop(self, timeout: float = 15.0, sig: int = signal.SIGTERM) -> None:
        """Ask the process to stop, wait, then SIGKILL it if it did not."""
        self.sample()
        if not self.exited():
            try:
                os.kill(self.pid, sig)
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.popen.wait(timeout=10)
            except ProcessLookupError:
                pass
        self._log.close()

    def log_tail(self, chars: int = 2000) -> str:
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return ""
        return data[-chars:].decode("utf-8", "replace")
