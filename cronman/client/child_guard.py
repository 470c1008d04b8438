"""The first process of each command ``cronman worker`` runs: it takes the command's
process group down with the worker.

Run by path, not imported (``python -I -S child_guard.py WORKER_PID KILL_AFTER --
COMMAND ARGS…``), so it uses the standard library only. The worker starts it
in a new session (its own process group). It asks the kernel (Linux
``prctl(PR_SET_PDEATHSIG)``, through ctypes, before the command is exec'd)
for SIGHUP when the worker's thread that started it ends, then forks and
execs the command in the same group and waits for it. SIGHUP means the
worker is gone (SIGKILLed, say): the whole group gets SIGTERM, and SIGKILL
after KILL_AFTER seconds, so no process of the run goes on working
unwatched. A SIGTERM sent to the group by the worker (a cancel) reaches the
command; the guard waits on. It exits as the command did: with its exit
code, or killed by the same signal.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time

PR_SET_PDEATHSIG = 1
#: The exit code when the command cannot be started (as a shell says it).
EXIT_NOT_RUN = 127
POLL = 0.05


class WorkerGone(Exception):  # noqa: N818 (a signal, not an error)
    """SIGHUP: the worker that started this process has died."""


def _gone(signum: int, frame: object) -> None:
    raise WorkerGone


def _ignore(signum: int, frame: object) -> None:
    """SIGTERM to the group is meant for the command; the guard waits on."""


def main(argv: list[str]) -> int:
    if len(argv) < 5 or argv[3] != "--":
        sys.stderr.write("usage: child_guard.py WORKER_PID KILL_AFTER -- COMMAND [ARG...]\n")
        return 2
    worker, kill_after, command = int(argv[1]), float(argv[2]), argv[4:]
    signal.signal(signal.SIGHUP, _gone)
    signal.signal(signal.SIGTERM, _ignore)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGHUP, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
        if os.getppid() != worker:  # the worker died before the prctl took
            raise WorkerGone
        pid = os.fork()
        if pid == 0:
            _exec(command)
        return _relay(_wait(pid))
    except WorkerGone:
        _stop_group(kill_after)
        return 1


def _exec(command: list[str]) -> None:
    """In the forked child: the command, with the signals as they were."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        os.write(2, f"cannot run {command[0]}: {exc.strerror}\n".encode())
    os._exit(EXIT_NOT_RUN)


def _wait(pid: int) -> int:
    while True:
        try:
            return os.waitpid(pid, 0)[1]
        except ChildProcessError:
            return 0


def _relay(status: int) -> int:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        time.sleep(1)  # the signal ends this process first
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1


def _stop_group(kill_after: float) -> None:
    """SIGTERM to the group, SIGKILL (this process too) after ``kill_after`` seconds
    unless every other member is gone by then."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(0, signal.SIGTERM)
    deadline = time.monotonic() + kill_after
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        if not _others_in_group():
            return
        time.sleep(POLL)
    os.killpg(0, signal.SIGKILL)


def _others_in_group() -> bool:
    """Whether a process other than this one is in this process group (from /proc)."""
    me, group = os.getpid(), os.getpgrp()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 2 and int(fields[2]) == group and fields[0] != b"Z":
            return True
    return False


if __name__ == "__main__":
    sys.exit(main(sys.argv))
