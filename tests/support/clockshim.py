"""A process whose wall clock a test moves while it runs (``clockshim/clockshim.c``).

The shim is an ``LD_PRELOAD`` library that adds an offset to the wall clock
only (``clock_gettime`` of ``CLOCK_REALTIME``, ``CLOCK_REALTIME_COARSE`` and
``CLOCK_TAI``, ``gettimeofday``, ``time``), read from a small file it maps at
start: a ``Clock`` rewrites that file in place, so the process sees each new
offset at once, as when NTP steps a host's clock. Its monotonic clock, its
sleeps and its timers keep the kernel's time. (libfaketime cannot do this
here: an offset changed at run time moves its monotonic clock too.)

    clock = Clock(tmp_path / "n3.offset")
    node = cluster.start_node("n3", env=clock.env())
    clock.set(12.5)  # 12.5 s fast from now on
    clock.set(0)

``library()`` compiles the shim with gcc once per source (a cache directory
under the repo's ``build/``, keyed by the source's hash); ``unavailable()``
says why it cannot be had (no gcc), for a skip.
"""

from __future__ import annotations

import ctypes
import hashlib
import mmap
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

SOURCE = Path(__file__).parent / "clockshim" / "clockshim.c"
CACHE = Path(__file__).resolve().parents[2] / "build" / "clockshim"
OFFSET_FILE_VAR = "CLOCKSHIM_OFFSET_FILE"

_built: Path | None = None
_building = threading.Lock()


class ShimUnavailable(RuntimeError):
    """The shim cannot be built here (no gcc, or it failed)."""


def unavailable() -> str | None:
    """Why the shim cannot be had on this machine, or None."""
    try:
        library()
    except ShimUnavailable as exc:
        return str(exc)
    return None


def library() -> Path:
    """The compiled shim, built on first use (and once per source version)."""
    global _built
    with _building:
        if _built is not None and _built.exists():
            return _built
        source = SOURCE.read_bytes()
        key = hashlib.sha256(source).hexdigest()[:16]
        out = CACHE / key / "libclockshim.so"
        if not out.exists():
            _compile(out)
        _built = out
        return out


def _compile(out: Path) -> None:
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        raise ShimUnavailable("clockshim needs a C compiler: gcc is not installed")
    out.parent.mkdir(parents=True, exist_ok=True)
    # Built beside its final name and renamed: concurrent builders (xdist) never
    # load a half-written library.
    fd, tmp = tempfile.mkstemp(dir=out.parent, suffix=".so")
    os.close(fd)
    try:
        res = subprocess.run([gcc, "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror",
                              "-o", tmp, str(SOURCE), "-ldl", "-pthread"],
                             capture_output=True, text=True, timeout=120, check=False)
        if res.returncode != 0:
            raise ShimUnavailable(f"clockshim did not compile:\n{res.stderr}")
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def env(path: str | os.PathLike[str]) -> dict[str, str]:
    """The environment that runs a process under the shim, its offset read from ``path``."""
    return {"LD_PRELOAD": str(library()), OFFSET_FILE_VAR: str(path)}


class Clock:
    """The offset file of one or more processes under the shim (0 at first).

    ``set`` is one aligned 8-byte store into the shared mapping: a process
    reading the offset sees the old value or the new one, never a mix."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "wb") as f:
            f.write(b"\0" * mmap.PAGESIZE)
        fd = os.open(self.path, os.O_RDWR)
        try:
            self._map: mmap.mmap | None = mmap.mmap(fd, mmap.PAGESIZE, mmap.MAP_SHARED,
                                                    mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self._cell: ctypes.c_int64 | None = ctypes.c_int64.from_buffer(self._map)
        self._lock = threading.Lock()

    def env(self) -> dict[str, str]:
        """The environment of a process whose wall clock this sets."""
        return env(self.path)

    @property
    def offset_ns(self) -> int:
        if self._cell is None:
            raise ValueError("clock closed")
        return int(self._cell.value)

    @property
    def offset_s(self) -> float:
        return self.offset_ns / 1e9

    def set(self, offset_s: float) -> None:
        """Put the wall clock ``offset_s`` seconds off the real one (negative: behind)."""
        self.set_ns(round(offset_s * 1e9))

    def set_ns(self, offset_ns: int) -> None:
        with self._lock:
            if self._cell is None:
                raise ValueError("clock closed")
            self._cell.value = offset_ns

    def close(self) -> None:
        """Unmap (the processes keep their own mapping and the last offset)."""
        with self._lock:
            self._cell = None  # the buffer export ends before the map closes
            if self._map is not None:
                self._map.close()
                self._map = None

    def __enter__(self) -> Clock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
