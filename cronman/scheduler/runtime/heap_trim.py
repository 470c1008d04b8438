"""Hand freed C heap back to the operating system (glibc ``malloc_trim``).

A node's first load and big reloads stream hundreds of thousands of rows
through the database driver on worker threads; glibc keeps the freed buffers
in per-thread arenas, so the resident size stays well above what the job
table holds. Trimming after such a load returns them. A no-op where glibc is
not the C library.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

_trim = None
try:
    _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    _trim = _libc.malloc_trim
    _trim.argtypes = [ctypes.c_size_t]
    _trim.restype = ctypes.c_int
except (OSError, AttributeError):  # not glibc
    _trim = None


def release_free_memory() -> bool:
    """Return free C-heap pages to the OS; False when unsupported."""
    if _trim is None:
        return False
    _trim(0)
    return True
