"""stdout and stderr of a container through named pipes, each into a ``LogTail``.

containerd's shim writes a task's stdout and stderr to FIFOs that we create
and name (``file://`` URIs would merge the two streams into one file). The
reader opens each FIFO non-blocking and also holds a write end of its own, so
that reads see "no data yet" rather than end-of-file before the shim opens
its side, and while an agent that restarted reattaches. Once the task has
exited, ``finish`` drops our write end and drains until the shim closes its
own: then everything the container wrote has been read.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import stat
from pathlib import Path

from cronman.logtail import LogTail

READ_CHUNK = 65536
#: How long ``finish`` waits for the shim to close its end after the exit.
DRAIN_TIMEOUT = 1.0


class FifoStream:
    """One FIFO read on the event loop into a ``LogTail``."""

    def __init__(self, path: Path, tail: LogTail) -> None:
        self.path = path
        self.tail = tail
        self.eof = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        if not path.exists():
            os.mkfifo(path, 0o600)
        elif not stat.S_ISFIFO(path.stat().st_mode):
            raise OSError(f"{path} exists and is not a FIFO")
        self._rfd: int | None = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        self._wfd: int | None = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        self._loop.add_reader(self._rfd, self._readable)

    def _readable(self) -> None:
        if self._rfd is None:
            return
        while True:
            try:
                data = os.read(self._rfd, READ_CHUNK)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._close_read()
                self.eof.set()
                return
            self.tail.write(data)

    def _close_read(self) -> None:
        if self._rfd is not None:
            self._loop.remove_reader(self._rfd)
            os.close(self._rfd)
            self._rfd = None

    async def finish(self, timeout: float = DRAIN_TIMEOUT) -> None:
        """Drain what is left once the writer is done (bounded), then close."""
        if self._wfd is not None:
            os.close(self._wfd)
            self._wfd = None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.eof.wait(), timeout)
        self._readable()
        self.close()

    def close(self) -> None:
        self._close_read()
        if self._wfd is not None:
            os.close(self._wfd)
            self._wfd = None


class ContainerLogs:
    """The stdout and stderr FIFOs of one container, in ``directory``."""

    def __init__(self, directory: Path, limit: int) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.stdout_tail = LogTail(limit)
        self.stderr_tail = LogTail(limit)
        self.stdout = FifoStream(directory / "stdout", self.stdout_tail)
        try:
            self.stderr = FifoStream(directory / "stderr", self.stderr_tail)
        except BaseException:
            self.stdout.close()
            raise

    @property
    def paths(self) -> tuple[str, str]:
        return str(self.stdout.path), str(self.stderr.path)

    async def finish(self) -> tuple[str, str]:
        """Drain both streams after the exit; returns (stdout tail, stderr tail)."""
        await asyncio.gather(self.stdout.finish(), self.stderr.finish())
        return self.stdout_tail.text(), self.stderr_tail.text()

    def close(self) -> None:
        self.stdout.close()
        self.stderr.close()

    def remove(self) -> None:
        self.close()
        self.remove_dir(self.directory)

    @staticmethod
    def remove_dir(directory: Path) -> None:
        shutil.rmtree(directory, ignore_errors=True)
