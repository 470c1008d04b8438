"""Run-id deduplication for receivers: each run is handled once, even when sent twice.

cronman sends a run again with the same ``Cronman-Run-Id`` when an attempt
failed (retry), when its node died mid-flight (at-least-once recovery) or on
a replay. A run id moves through three states here:

- absent: ``claim`` takes it (``Claim.NEW``) and the caller handles the run;
- in progress: another delivery of the run is being handled now
  (``Claim.IN_PROGRESS``; answer non-2xx so cronman tries again later). The
  claim expires after ``processing_ttl`` in case its holder died;
- done (``complete``): later deliveries get ``Claim.DONE`` (answer 2xx
  without handling) for ``done_ttl``.

A failed handling ``release``\\ s the claim, so the retry is handled: marking a
run seen before it succeeded would turn a failure into a silent loss.

``MemoryDeduplicator`` (one process; bounded, oldest forgotten first) and
``RedisDeduplicator`` (shared by every process; takes a redis-py client,
so this module imports no Redis library).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from enum import StrEnum
from typing import Any, Protocol, TypeVar

DEFAULT_DONE_TTL = 7 * 86_400
DEFAULT_PROCESSING_TTL = 300
DEFAULT_MAX_ENTRIES = 100_000
DEFAULT_REDIS_PREFIX = "cronman:receiver:run:"

T = TypeVar("T")


class Claim(StrEnum):
    NEW = "new"
    IN_PROGRESS = "in_progress"
    DONE = "done"


class Deduplicator(Protocol):
    """Where receivers remember run ids (see the module docstring)."""

    def claim(self, run_id: str) -> Claim:
        """Take the run if nobody has: ``NEW`` means the caller now handles it."""
        ...

    def complete(self, run_id: str) -> None:
        """The run was handled: later deliveries are duplicates."""
        ...

    def release(self, run_id: str) -> None:
        """Handling failed: the next delivery of the run is handled again."""
        ...


def process_once(dedup: Deduplicator, run_id: str,
                 handler: Callable[[], T]) -> tuple[Claim, T | None]:
    """Run ``handler`` unless the run was (or is being) handled.

    Returns the claim and, for ``NEW``, the handler's result. An exception
    releases the claim and propagates.
    """
    claim = dedup.claim(run_id)
    if claim is not Claim.NEW:
        return claim, None
    try:
        result = handler()
    except BaseException:
        dedup.release(run_id)
        raise
    dedup.complete(run_id)
    return claim, result


class MemoryDeduplicator:
    """Run ids in this process's memory: at most ``max_entries``, oldest dropped first."""

    def __init__(self, *, max_entries: int = DEFAULT_MAX_ENTRIES,
                 done_ttl: float = DEFAULT_DONE_TTL,
                 processing_ttl: float = DEFAULT_PROCESSING_TTL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self.max_entries = max_entries
        self.done_ttl = done_ttl
        self.processing_ttl = processing_ttl
        self._clock = clock
        self._entries: OrderedDict[str, tuple[Claim, float]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def claim(self, run_id: str) -> Claim:
        now = self._clock()
        with self._lock:
            entry = self._entries.get(run_id)
            if entry is not None and entry[1] > now:
                return entry[0]
            self._put(run_id, Claim.IN_PROGRESS, now + self.processing_ttl)
            return Claim.NEW

    def complete(self, run_id: str) -> None:
        with self._lock:
            self._put(run_id, Claim.DONE, self._clock() + self.done_ttl)

    def release(self, run_id: str) -> None:
        with self._lock:
            entry = self._entries.get(run_id)
            if entry is not None and entry[0] is Claim.IN_PROGRESS:
                del self._entries[run_id]

    def _put(self, run_id: str, state: Claim, expires: float) -> None:
        self._entries[run_id] = (state, expires)
        self._entries.move_to_end(run_id)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)


class RedisLike(Protocol):
    """The part of a redis-py client (``redis.Redis``) that ``RedisDeduplicator`` uses."""

    def set(self, name: str, value: str, *, ex: int | None = None,
            nx: bool = False) -> Any: ...

    def get(self, name: str) -> Any: ...

    def eval(self, script: str, numkeys: int, *keys_and_args: str) -> Any: ...


# Delete the claim only if it is still ours (a claim that expired may have
# been taken by another delivery since).
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class RedisDeduplicator:
    """Run ids in Redis: one key per run, ``<prefix><run id>``, with a TTL.

    The value is ``done``, or ``processing:<token>`` while a delivery holds
    the claim. Safe across processes and hosts.
    """

    def __init__(self, client: RedisLike, *, prefix: str = DEFAULT_REDIS_PREFIX,
                 done_ttl: int = DEFAULT_DONE_TTL,
                 processing_ttl: int = DEFAULT_PROCESSING_TTL) -> None:
        self.client = client
        self.prefix = prefix
        self.done_ttl = int(done_ttl)
        self.processing_ttl = int(processing_ttl)
        self._tokens: dict[str, str] = {}
        self._lock = threading.Lock()

    def claim(self, run_id: str) -> Claim:
        key = self.prefix + run_id
        token = "processing:" + uuid.uuid4().hex
        for _ in range(3):  # the key may expire between SET NX and GET
            if self.client.set(key, token, nx=True, ex=self.processing_ttl):
                with self._lock:
                    self._tokens[run_id] = token
                return Claim.NEW
            value = self.client.get(key)
            if isinstance(value, bytes):
                value = value.decode("utf-8", "replace")
            if value == "done":
                return Claim.DONE
            if value is not None:
                return Claim.IN_PROGRESS
        return Claim.IN_PROGRESS

    def complete(self, run_id: str) -> None:
        with self._lock:
            self._tokens.pop(run_id, None)
        self.client.set(self.prefix + run_id, "done", ex=self.done_ttl)

    def release(self, run_id: str) -> None:
        with self._lock:
            token = self._tokens.pop(run_id, None)
        if token is not None:
            self.client.eval(_RELEASE, 1, self.prefix + run_id, token)
