"""Polling with a deadline, for tests that wait on real processes."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    check: Callable[[], T],
    timeout: float,
    what: str,
    *,
    interval: float = 0.1,
    alive: Callable[[], None] | None = None,
) -> T:
    """Call ``check`` until it returns something truthy and return that.

    ``alive`` is called between polls and should raise when whatever is
    awaited can no longer happen (a process died), to fail fast.
    """
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        if alive is not None:
            alive()
        time.sleep(interval)
