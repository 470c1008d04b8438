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

Standard library only, and no import of cronman: the shim runs it with
``python -I -S`` (the agent writes an executable wrapper for it,
``write_wrapper``). containerd passes the URI's query as ``key value``
arguments in no fixed order: ``dir D limit N``.
"""

from __future__ import annotations

import os
import selectors
import signal
import sys
from pathlib import Path

STREAMS = ("stdout", "stderr")
READ_CHUNK = 65536


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
    """Copy each readable fd into its ring until all reach end of file."""
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
                os.close(fd)
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


def main(argv: list[str]) -> int:
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
