"""Rate-limited logging: one clear line for a repeated error, not one per fire."""

from __future__ import annotations

import logging
import time


class RateLimitedLog:
    """Logs a message for a key at most once per ``interval`` seconds, saying
    how many were held back in between."""

    def __init__(self, logger: logging.Logger, interval: float = 30.0) -> None:
        self._log = logger
        self._interval = interval
        self._last: dict[str, tuple[float, int]] = {}

    def __call__(self, level: int, key: str, msg: str, *args: object) -> None:
        now = time.monotonic()
        last = self._last.get(key)
        if last is not None and now - last[0] < self._interval:
            self._last[key] = (last[0], last[1] + 1)
            return
        suppressed = last[1] if last is not None else 0
        self._last[key] = (now, 0)
        if suppressed:
            self._log.log(level, msg + " (%d more like this since the last report)",
                          *args, suppressed)
        else:
            self._log.log(level, msg, *args)

    def error(self, key: str, msg: str, *args: object) -> None:
        self(logging.ERROR, key, msg, *args)

    def warning(self, key: str, msg: str, *args: object) -> None:
        self(logging.WARNING, key, msg, *args)

    def clear(self, key: str) -> None:
        """Forget ``key`` (the condition is over: report the next one at once)."""
        self._last.pop(key, None)
