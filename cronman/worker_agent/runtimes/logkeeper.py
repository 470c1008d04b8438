"""A container's stdout and stderr kept in bounded files that outlive the agent.

containerd runs this file as the task's logging binary (``binary://`` stdio):
the shim starts it with the container's stdout and stderr as fds 3 and 4 and
waits for a byte (or end of file) on fd 5 before the task starts. It copies
each stream into ``DIR/stdout`` and ``DIR/stderr`` until end of file, which
comes when the shim closes its ends at the task's deletion. The shim, not
the agent, owns this process, so what a container writes while its agent is
down (SIGKILLed, restarting) is kept, and a reattached agent reads the tail
from the files.

Each stream is bounded: once its file holds ``limit`` bytes it becomes
``NAME.1`` (the former one dropped) and a new file starts, so a stream keeps
between ``limit`` and ``2 * limit`` bytes on disk and its last ``limit``
bytes are always there (``read_tail``).

The ``process`` runtime runs it as the supervisor of a run's command
(``supervise``): the command's parent, in a session of its own, it copies
the command's output the same way and writes the exit code to ``DIR/exit``,
so that the command neither dies of SIGPIPE nor blocks when its agent dies,
and an agent back after its restart reads how it ended.

Standard library only, and no import of cronman: it runs under
``python -I -S`` (for containerd the agent writes an executable wrapper,
``write_wrapper``). containerd passes the URI's query as ``key value``
arguments in no fixed order: ``dir D limit N``.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

STREAMS = ("stdout", "stderr")
READ_CHUNK = 65536
PID_FILE = "pid"  # the supervised command's pid (its process group's too)
EXIT_FILE = "exit"  # "<exit code> <unix ms>", written once it ended


class RingFile:
    """One stream's bounded pair of files, ``NAME`` and ``NAME.1``."""

    def __init__(self, path: Path, limit: int) -> None:
        self.path = path
        self.previous = path.with_name(path.name + ".1")
        self.limit = limit
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._size = os.fstat(self._fd).st_size

    def write(self, data: bytes) -> None:
        if len(data) >= self.limit:
            data = data[-self.limit:]
        if self._size + len(data) > self.limit:
            os.close(self._fd)
            os.replace(self.path, self.previous)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            self._size = 0
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
        self._size += len(data)

    def close(self) -> None:
        os.close(self._fd)


def read_tail(directory: Path, name: str, limit: int) -> bytes:
    """The last ``limit`` bytes of stream ``name`` kept in ``directory``."""
    data = b""
    for path in (directory / f"{name}.1", directory / name):
        try:
            data += path.read_bytes()
        except FileNotFoundError:
            continue
    return data[-limit:]


def copy_streams(fds: dict[int, RingFile]) -> None:
    """Copy each readable fd into its ring until all reach end of file (the
    rings are closed, the fds left to the caller)."""
    sel = selectors.DefaultSelector()
    for fd in fds:
        sel.register(fd, selectors.EVENT_READ)
    while fds:
        for key, _ in sel.select():
            fd = int(key.fd)
            try:
                data = os.read(fd, READ_CHUNK)
            except InterruptedError:
                continue
            except OSError:
                data = b""
            if not data:
                sel.unregister(fd)
                fds.pop(fd).close()
                continue
            fds[fd].write(data)


def write_wrapper(path: Path, python: str) -> None:
    """Write the executable containerd runs as the logging binary: this
    file's source behind a ``python -IS`` shebang (atomically replaced)."""
    source = Path(__file__).read_text()
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"#!{python} -IS\n{source}")
    tmp.chmod(0o755)
    os.replace(tmp, path)


def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def supervise(directory: Path, limit: int, uid: int | None, gid: int | None,
              command: list[str]) -> int:
    """Run ``command`` (env and working directory: this process's) in a
    process group of its own, as ``uid``/``gid`` when given; tell the agent
    on stdout ``started PID`` or ``error MESSAGE``, then detach from it."""
    rings = {name: RingFile(directory / name, limit) for name in STREAMS}
    try:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, process_group=0, user=uid, group=gid,
                                extra_groups=[] if uid is not None else None)
    except OSError as exc:
        os.write(1, f"error {exc.strerror or exc}\n".encode())
        return 127
    assert proc.stdout is not None and proc.stderr is not None
    write_atomically(directory / PID_FILE, str(proc.pid))
    try:
        os.write(1, f"started {proc.pid}\n".encode())
    except OSError:
        pass  # the agent is gone already: carry on
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    copy_streams({proc.stdout.fileno(): rings["stdout"], proc.stderr.fileno(): rings["stderr"]})
    proc.stdout.close()
    proc.stderr.close()
    code = proc.wait()
    if code < 0:
        code = 128 - code  # killed by signal N: 128 + N, as a shell reports it
    write_atomically(directory / EXIT_FILE, f"{code} {int(time.time() * 1000)}")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["supervise"]:
        where, bound, uid, gid = argv[1:5]
        # Signals for the command go to its process group, not here; one to
        # this session (a terminal's) must not end the supervisor. Handlers,
        # not SIG_IGN, which the command would inherit.
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, lambda *_: None)
        return supervise(Path(where), int(bound), None if uid == "-" else int(uid),
                         None if gid == "-" else int(gid), argv[6:])
    args = dict(zip(argv[::2], argv[1::2], strict=False))
    directory = Path(args["dir"])
    limit = int(args.get("limit", "4096"))
    # The shim sends SIGTERM once it closed the streams: end of file is near,
    # and copying up to it is what keeps the last lines. (A handler, not
    # SIG_IGN: nothing of this process is inherited.)
    signal.signal(signal.SIGTERM, lambda *_: None)
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    rings = {3: RingFile(directory / "stdout", limit), 4: RingFile(directory / "stderr", limit)}
    os.write(5, b"1")  # ready: the shim starts the task
    os.close(5)
    copy_streams(rings)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
