"""``CommandHandler``: a worker handler that runs one command per run (``cronman worker``).

The command gets the run's payload as JSON on its stdin and in
``CRONMAN_PAYLOAD``, with ``CRONMAN_RUN_ID``, ``CRONMAN_JOB_ID``,
``CRONMAN_ATTEMPT``, ``CRONMAN_SCHEDULED_FOR`` and ``CRONMAN_QUEUE``, and the
run's trace context as ``TRACEPARENT``/``TRACESTATE`` when tracing is on; the
worker's own ``CRONMAN_TOKEN`` (and trace context) is not passed on. Exit 0 is ``succeeded``;
anything else ``failed`` with ``exit code N`` (or ``killed by signal S``).
The result is ``{"exit_code", "worker_id", "logs_tail": {"stdout", "stderr"}}``
with the last ``LOG_TAIL_BYTES`` of each stream (the container target's bound;
NUL bytes as U+FFFD, since the API takes no NUL).

A line ``CRONMAN_PROGRESS [PERCENT] [TEXT]`` on the command's stdout is sent
as the run's progress (``CRONMAN_PROGRESS 42 copied 4200 rows``); each
heartbeat carries the tails of both streams so far when they changed (the run
page shows them while the command runs).

A cancel (asked through the API, the lease lost, the timeout, the worker
stopping) sends SIGTERM to the command's process group, SIGKILL after
``kill_after`` seconds; so does the command's end to whatever it left
running in its group. The command runs under ``child_guard``, which takes
the group down if the worker dies.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from cronman.client.run_context import RunContext, RunFailed, without_nul
from cronman.logtail import LOG_TAIL_BYTES, LogTail

PROGRESS_PREFIX = "CRONMAN_PROGRESS"
GUARD = Path(__file__).with_name("child_guard.py")
DEFAULT_KILL_AFTER = 10.0
READ_CHUNK = 65536
# A line longer than this is no progress line; only its start is looked at.
LINE_MAX = 2048
POLL = 0.05
# How long the streams may stay open after the group was killed (a process
# outside the group holding them): the tails are taken as they are.
DRAIN_WAIT = 2.0
# Variables of the worker's environment a command does not get (the trace
# context is the run's, or none).
WITHHELD_ENV = ("CRONMAN_TOKEN", "TRACEPARENT", "TRACESTATE")


def parse_progress(line: str) -> tuple[str | None, float | None] | None:
    """(text, percent) of a progress line, or None for any other line."""
    if not line.startswith(PROGRESS_PREFIX):
        return None
    rest = line[len(PROGRESS_PREFIX):]
    if rest and not rest[0].isspace():
        return None
    rest = rest.strip()
    first, _, text = rest.partition(" ")
    try:
        percent: float | None = float(first)
    except ValueError:
        percent, text = None, rest
    if percent is not None and not 0 <= percent <= 100:  # also NaN
        percent, text = None, rest
    return (text.strip() or None), percent


def describe_exit(returncode: int) -> tuple[int, str | None]:
    """(exit_code, error) of a command's return code: a signal as 128 + S."""
    if returncode < 0:
        sig = -returncode
        return 128 + sig, f"killed by signal {sig}"
    return returncode, None if returncode == 0 else f"exit code {returncode}"


class CommandHandler:
    """Runs ``command`` for each run (see the module docstring)."""

    def __init__(self, command: Sequence[str], *, kill_after: float = DEFAULT_KILL_AFTER,
                 env: Mapping[str, str] | None = None, tail_bytes: int = LOG_TAIL_BYTES,
                 python: str = sys.executable) -> None:
        if not command:
            raise ValueError("a command is needed")
        self.command = list(command)
        self.kill_after = kill_after
        self.env = dict(os.environ if env is None else env)
        self.tail_bytes = tail_bytes
        self.python = python

    def __call__(self, payload: Any, ctx: RunContext) -> dict[str, Any]:
        data = json.dumps(payload, ensure_ascii=False)
        proc = subprocess.Popen(
            [self.python, "-I", "-S", str(GUARD), str(os.getpid()), str(self.kill_after),
             "--", *self.command],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=self._env(data, ctx), start_new_session=True, close_fds=True)
        out, err = LogTail(self.tail_bytes), LogTail(self.tail_bytes)
        ctx.follow_output(lambda: (out.text(), err.text()))
        assert proc.stdin and proc.stdout and proc.stderr
        readers = [
            _thread(_feed, proc.stdin, data.encode("utf-8")),
            _thread(_read, proc.stdout, out, _progress_lines(ctx)),
            _thread(_read, proc.stderr, err, None),
        ]
        returncode = self._wait(proc, ctx)
        self._end_group(proc.pid, readers)
        exit_code, error = describe_exit(returncode)
        result = {"exit_code": exit_code, "worker_id": ctx.worker_id,
                  "logs_tail": {"stdout": without_nul(out.text()),
                                "stderr": without_nul(err.text())}}
        if error is not None:
            raise RunFailed(error, result)
        return result

    def _env(self, payload: str, ctx: RunContext) -> dict[str, str]:
        env = {k: v for k, v in self.env.items() if k not in WITHHELD_ENV}
        env.update({
            "CRONMAN_PAYLOAD": payload,
            "CRONMAN_RUN_ID": ctx.run_id,
            "CRONMAN_JOB_ID": ctx.run["job_id"],
            "CRONMAN_ATTEMPT": str(ctx.attempt),
            "CRONMAN_SCHEDULED_FOR": ctx.run["scheduled_for"],
            "CRONMAN_QUEUE": ctx.queue,
        })
        env.update((name.upper(), value) for name, value in ctx.trace_headers().items())
        return env

    def _wait(self, proc: subprocess.Popen[bytes], ctx: RunContext) -> int:
        """The command's return code; a cancel stops its group (TERM, then KILL)."""
        term_at: float | None = None
        while True:
            try:
                return proc.wait(POLL)
            except subprocess.TimeoutExpired:
                pass
            if term_at is None and ctx.cancelled.is_set():
                term_at = time.monotonic()
                _signal_group(proc.pid, signal.SIGTERM)
            elif term_at is not None and time.monotonic() - term_at >= self.kill_after:
                _signal_group(proc.pid, signal.SIGKILL)
                term_at = float("inf")

    def _end_group(self, group: int, readers: list[threading.Thread]) -> None:
        """What the command left running in its group is stopped too (the streams
        close when the last process holding them ends)."""
        if not _alive(readers, 0.0):
            return
        _signal_group(group, signal.SIGTERM)
        if _alive(readers, self.kill_after):
            _signal_group(group, signal.SIGKILL)
            _alive(readers, DRAIN_WAIT)


def _signal_group(group: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, sig)


def _alive(threads: list[threading.Thread], wait: float) -> bool:
    deadline = time.monotonic() + wait
    for t in threads:
        t.join(max(deadline - time.monotonic(), 0.0))
    return any(t.is_alive() for t in threads)


def _thread(target: Callable[..., None], *args: Any) -> threading.Thread:
    t = threading.Thread(target=target, args=args, daemon=True)
    t.start()
    return t


def _feed(stream: IO[bytes], data: bytes) -> None:
    """The payload on the command's stdin (a command that does not read it is no error)."""
    with contextlib.suppress(OSError):
        stream.write(data)
    with contextlib.suppress(OSError):
        stream.close()


def _read(stream: IO[bytes], tail: LogTail, on_line: Callable[[bytes], None] | None) -> None:
    partial = b""
    fd = stream.fileno()
    try:
        while chunk := os.read(fd, READ_CHUNK):
            tail.write(chunk)
            if on_line is None:
                continue
            *lines, partial = (partial + chunk).split(b"\n")
            for line in lines:
                on_line(line[:LINE_MAX])
            partial = partial[:LINE_MAX]
        if on_line is not None and partial:
            on_line(partial)
    except OSError:
        pass
    finally:
        stream.close()


def _progress_lines(ctx: RunContext) -> Callable[[bytes], None]:
    def on_line(line: bytes) -> None:
        progress = parse_progress(line.decode("utf-8", "replace").rstrip("\r"))
        if progress is not None:
            ctx.progress(*progress)

    return on_line
