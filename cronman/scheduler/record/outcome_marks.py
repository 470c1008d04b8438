"""Outcome marks: what a node learnt of a run's attempt, in the coordinator
within milliseconds, long before its run row is written.

A node writes run rows in batches (the result writer, every quarter second or
so). A node killed in between has sent runs whose outcome it knew but never
wrote; without more, the lease sweeper would send them again. So as soon as
an attempt ends, the dispatcher hands its ``RunUpdate`` to the
``OutcomeMarker``, which sends a compact mark per run id to the coordinator
(``Coordinator.mark_outcomes``), batched and off the event loop. A sweeper
that takes over an expired run reads its mark first: a final mark is
recorded as the run's outcome instead of sending the run again; a
``retrying`` mark makes the next attempt the one after it. Only the attempts
truly under way at the kill (and marks not yet sent, a few milliseconds'
worth) are sent again.

Marks live a few lease lengths (``MARK_TTL_LEASES``): long enough for any
sweeper to find them, and they are only an optimisation; without them (the
coordinator down, a mark expired or on an unreachable shard) recovery is what
``at_least_once`` always allowed, a re-delivery with the same run id.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from cronman.coordination.base import Coordinator
from cronman.errors import CoordinatorUnavailable
from cronman.eventloop import PerLoop
from cronman.models import RunUpdate
from cronman.scheduler.runtime.metrics import NodeMetrics
from cronman.scheduler.runtime.ratelog import RateLimitedLog
from cronman.timeutil import from_ms, to_ms
from cronman.vocabulary import FINAL_STATUSES

log = logging.getLogger(__name__)

# A mark lives this many lease lengths: a sweeper takes a dead node's run one
# lease after its last renewal, a live member's only after two more
# (recovery.SPARE_LEASES); one more for the sweep interval and slack.
MARK_TTL_LEASES = 4
# Seconds a first mark waits for others before its batch is sent: under load
# a batch carries many marks; a kill loses at most this long's worth.
MARK_DELAY = 0.01
# A mark carries a snippet, not the whole record (container logs can be long).
MAX_ERROR_CHARS = 500
MAX_RESULT_CHARS = 1000
RESULT_TEXT_CHARS = 200


@dataclass(frozen=True, slots=True)
class OutcomeMark:
    """The end of one attempt of a run, as its node recorded it (times in Unix ms)."""

    status: str
    attempt: int
    node_id: str = ""
    started_ms: int | None = None
    finished_ms: int | None = None
    lateness_ms: int | None = None
    duration_ms: int | None = None
    result: dict[str, Any] | None = None
    error: str | None = None
    next_attempt_ms: int | None = None

    @property
    def final(self) -> bool:
        """Whether the run ended with this attempt (else it waits for a retry)."""
        return self.status in FINAL_STATUSES

    @classmethod
    def of_update(cls, u: RunUpdate, node_id: str) -> OutcomeMark:
        """The mark of ``u``, the update a node queued when an attempt ended."""
        return cls(status=u.status, attempt=u.attempt or 0, node_id=node_id,
                   started_ms=_ms(u.started_at), finished_ms=_ms(u.finished_at),
                   lateness_ms=u.lateness_ms, duration_ms=u.duration_ms,
                   result=_small_result(u.result),
                   error=None if u.error is None else u.error[:MAX_ERROR_CHARS],
                   next_attempt_ms=_ms(u.next_attempt_at))

    def encode(self) -> str:
        return _encode(self.status, self.attempt, self.node_id, self.started_ms,
                       self.finished_ms, self.lateness_ms, self.duration_ms, self.result,
                       self.error, self.next_attempt_ms)

    @staticmethod
    def encode_update(u: RunUpdate, node_id: str) -> str:
        """``of_update(u, node_id).encode()``, without the mark in between
        (it runs for every attempt)."""
        return _encode(u.status, u.attempt or 0, node_id, _ms(u.started_at),
                       _ms(u.finished_at), u.lateness_ms, u.duration_ms,
                       _small_result(u.result),
                       None if u.error is None else u.error[:MAX_ERROR_CHARS],
                       _ms(u.next_attempt_at))

    @classmethod
    def decode(cls, text: str) -> OutcomeMark | None:
        """The mark ``encode`` wrote; None for anything unreadable."""
        try:
            f = json.loads(text)
            mark = cls(status=str(f["s"]), attempt=int(f["a"]), node_id=str(f.get("n", "")),
                       started_ms=_int_or_none(f.get("t0")),
                       finished_ms=_int_or_none(f.get("t1")),
                       lateness_ms=_int_or_none(f.get("l")),
                       duration_ms=_int_or_none(f.get("d")),
                       result=f.get("r") if isinstance(f.get("r"), dict) else None,
                       error=None if f.get("e") is None else str(f["e"]),
                       next_attempt_ms=_int_or_none(f.get("nx")))
        except (ValueError, TypeError, KeyError, AttributeError):
            return None
        return mark

    def update(self, run_id: str, scheduled_for: datetime) -> RunUpdate:
        """The run change this mark stands for."""
        return RunUpdate(id=run_id, scheduled_for=scheduled_for, status=self.status,
                         attempt=self.attempt, started_at=_dt(self.started_ms),
                         finished_at=_dt(self.finished_ms), lateness_ms=self.lateness_ms,
                         duration_ms=self.duration_ms, result=self.result, error=self.error,
                         next_attempt_at=_dt(self.next_attempt_ms))


class OutcomeMarker:
    """Sends outcome marks from the event loop to the coordinator, batched.

    ``add`` (on the loop, never blocking) queues the mark of an update; the
    first mark of a batch schedules its send ``delay`` seconds later, on the
    loop itself (``Coordinator.amark_outcomes``). One batch is in flight at a
    time, so marks of one run reach the coordinator in order; marks queued
    meanwhile go in the next batch. A batch the coordinator refuses is dropped
    (counted and logged): the sweeper then re-sends those runs, as without
    marks.
    """

    def __init__(self, coordinator: Coordinator, node_id: str, ttl_ms: int,
                 metrics: NodeMetrics, *, delay: float = MARK_DELAY) -> None:
        self._coordinator = coordinator
        self.node_id = node_id
        self.ttl_ms = max(1, int(ttl_ms))
        self.delay = delay
        self._metrics = metrics
        self._pending: dict[str, tuple[int, str]] = {}  # run id -> (attempt, mark)
        self._handle: asyncio.TimerHandle | None = None
        self._in_flight: asyncio.Task[None] | None = None
        self._loop: PerLoop[asyncio.AbstractEventLoop] = PerLoop()
        self._ratelog = RateLimitedLog(log)
        self.sent = 0  # marks the coordinator took (for tests and stats)

    def add(self, u: RunUpdate) -> None:
        """Queue the mark of ``u`` (an attempt's end: a final or ``retrying`` update)."""
        self._pending[u.id] = (u.attempt or 0, OutcomeMark.encode_update(u, self.node_id))
        if self._handle is None and self._in_flight is None:
            self._handle = self._running_loop().call_later(self.delay, self._send)

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop.get(asyncio.get_running_loop)

    @property
    def pending(self) -> int:
        return len(self._pending)

    def _send(self) -> None:
        self._handle = None
        if not self._pending:
            return
        batch = [(run_id, attempt, text) for run_id, (attempt, text) in self._pending.items()]
        self._pending = {}
        self._in_flight = self._running_loop().create_task(self._mark(batch))

    async def _mark(self, batch: list[tuple[str, int, str]]) -> None:
        try:
            await self._coordinator.amark_outcomes(batch, self.ttl_ms)
        except CoordinatorUnavailable as exc:
            self._metrics.coordinator_errors.labels("mark_outcomes").inc()
            self._ratelog.warning("marks", "outcome marks not recorded (%s): should this "
                                  "node die before writing its runs, they are sent again", exc)
        else:
            self.sent += len(batch)
            self._ratelog.clear("marks")
        finally:
            self._in_flight = None
            if self._pending and self._handle is None:
                self._handle = self._running_loop().call_later(self.delay, self._send)

    async def flush(self, timeout: float) -> None:
        """Send what is queued now and wait (at most ``timeout`` seconds) for it."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        deadline = self._running_loop().time() + timeout
        while self._pending or self._in_flight is not None:
            if self._in_flight is None:
                self._send()
            left = deadline - self._running_loop().time()
            if left <= 0 or self._in_flight is None:
                return
            await asyncio.wait([self._in_flight], timeout=left)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._in_flight is not None:
            self._in_flight.cancel()


def _encode(status: str, attempt: int, node_id: str, started_ms: int | None,
            finished_ms: int | None, lateness_ms: int | None, duration_ms: int | None,
            result: dict[str, Any] | None, error: str | None,
            next_attempt_ms: int | None) -> str:
    fields: dict[str, Any] = {"s": status, "a": attempt}
    for key, value in (("n", node_id), ("t0", started_ms), ("t1", finished_ms),
                       ("l", lateness_ms), ("d", duration_ms), ("r", result), ("e", error),
                       ("nx", next_attempt_ms)):
        if value is not None and value != "":
            fields[key] = value
    return orjson.dumps(fields, default=str).decode()


def _ms(t: datetime | None) -> int | None:
    return None if t is None else to_ms(t)


def _dt(ms: int | None) -> datetime | None:
    return None if ms is None else from_ms(ms)


def _int_or_none(v: Any) -> int | None:
    return None if v is None else int(v)


def _small_result(result: dict[str, Any] | None) -> dict[str, Any] | None:
    """``result``, or when it is long, its scalar fields with texts cut to their
    last ``RESULT_TEXT_CHARS`` characters (a log tail keeps its end)."""
    if not result:
        return None
    if len(orjson.dumps(result, default=str)) <= MAX_RESULT_CHARS:
        return result
    small: dict[str, Any] = {}
    for key, value in result.items():
        if isinstance(value, str):
            small[key] = value[-RESULT_TEXT_CHARS:]
        elif value is None or isinstance(value, bool | int | float):
            small[key] = value
    return small
