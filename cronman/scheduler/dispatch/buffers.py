"""Overlap buffers (SPEC §3 ``concurrency``): the fires a job keeps while a run
of it is in flight.

- ``buffer_one``: the latest fire waits; a newer one takes its place, the
  one it replaces recorded ``skipped`` with the reason.
- ``buffer_all``: every fire waits, in order, up to the job's
  ``buffer_limit`` (``DEFAULT_BUFFER_LIMIT``); a fire beyond it is skipped.

A fire is looked at here after its start mark and its upstream wait, right
before its first attempt (a schedule's fire or a trigger's run; manual runs
and retries are never held). It waits when a run of its job is in flight:
held here and started (or let through here already), or, as the claim read
it, on another node. A held fire is a run row like any other -- ``claimed``,
marked started, its lease renewed, its ``error`` saying why it waits
(``BUFFERED_PREFIX``) and its ``gate`` behind which runs -- so a node that
takes the job's runs over after this one died finds it and holds it again.

When the last run in flight here ends, the next fire goes (the latest for
``buffer_one``, the oldest for ``buffer_all``), from a loop callback of its
own: one fire started per end, and no recursion through the finisher. Runs
in flight on another node are looked at again every ``REMOTE_POLL`` seconds
until they end (no node tells another of its runs' ends).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from cronman.models import Run
from cronman.scheduler.fires import ActiveRun
from cronman.scheduler.runtime.clock import ReferenceClock
from cronman.timeutil import format_rfc3339
from cronman.vocabulary import (
    BUFFERED_POLICIES,
    BUFFERED_PREFIX,
    DEFAULT_BUFFER_LIMIT,
    GATED_ORIGINS,
    ConcurrencyPolicy,
)

log = logging.getLogger(__name__)

REMOTE_POLL = 1.0
_BUFFERED = frozenset(p.value for p in BUFFERED_POLICIES)
_GATED = frozenset(o.value for o in GATED_ORIGINS)

RemoteLookup = Callable[[str], Awaitable[list[Run]]]


class BufferHost(Protocol):
    """What the buffers ask of the dispatcher that holds the runs."""

    def in_flight_here(self, job_id: str) -> Sequence[ActiveRun]:
        """The job's runs held here that are in flight (started, or let through)."""

    def note_buffered(self, ar: ActiveRun) -> None:
        """``ar`` waits in a buffer: its row says so (``error``, ``gate``)."""

    def skip_buffered(self, ar: ActiveRun, error: str) -> None:
        """End ``ar`` ``skipped`` with ``error`` (replaced, or the buffer is full)."""

    def release(self, ar: ActiveRun) -> None:
        """``ar`` leaves its buffer: start it (if its job still wants it)."""


def buffered(ar: ActiveRun) -> bool:
    """Whether ``ar`` passes the buffers: a first attempt of a schedule's fire or
    a trigger's run, of a job with a buffer policy, not let through yet."""
    return (ar.job.concurrency in _BUFFERED and not ar.buffer_passed
            and ar.origin in _GATED and ar.started_at is None)


class Buffers:
    """The fires each job's buffer holds on this node."""

    def __init__(self, host: BufferHost, clock: ReferenceClock,
                 remote: RemoteLookup | None = None) -> None:
        self._host = host
        self._clock = clock
        self._remote = remote
        self._held: dict[str, deque[ActiveRun]] = {}
        # Per job: runs of other nodes in flight a held fire waits behind.
        self._blockers: dict[str, set[str]] = {}
        self._watchers: dict[str, asyncio.Task[None]] = {}

    def held(self, job_id: str) -> int:
        """How many fires of the job its buffer holds here."""
        return len(self._held.get(job_id, ()))

    def admit(self, ar: ActiveRun, remote: Sequence[Run]) -> bool:
        """Whether ``ar`` may go now; else it is held (or skipped) here.
        ``remote``: the job's runs in flight on other nodes, as the claim read them."""
        job_id = ar.job.id
        local = [r for r in self._host.in_flight_here(job_id) if r is not ar]
        blockers = self._blockers.get(job_id, set()) | {r.id for r in remote}
        queue = self._held.get(job_id)
        if not local and not blockers and not queue:
            ar.buffer_passed = True
            return True
        if queue is None:
            queue = self._held[job_id] = deque()
        replaced: list[ActiveRun] = []
        if ar.job.concurrency == ConcurrencyPolicy.BUFFER_ONE:
            replaced = list(queue)
            queue.clear()
        else:
            limit = ar.job.buffer_limit or DEFAULT_BUFFER_LIMIT
            if len(queue) >= limit:
                self._host.skip_buffered(ar, f"the buffer is full: {len(queue)} fires of the "
                                             f"job wait (buffer_limit {limit})")
                return False
        if blockers:
            self._blockers[job_id] = blockers
        behind = [r.run_id for r in local] + sorted(blockers)
        ar.waiting = True
        ar.gate = {**(ar.gate or {}), "buffered": {
            "policy": ar.job.concurrency, "behind": behind,
            "since": format_rfc3339(self._clock.now())}}
        queue.append(ar)
        self._host.note_buffered(ar)
        for old in replaced:  # after the newer one is in: the buffer is never found empty
            old.waiting = False
            self._host.skip_buffered(old, f"replaced in the buffer by the fire of "
                                          f"{format_rfc3339(ar.scheduled_for)} (buffer_one)")
        if blockers:
            self._watch_remote(job_id)
        return False

    def ended(self, ar: ActiveRun) -> None:
        """A run of the job is no longer held here (``RunHolder.forget``):
        drop it from its buffer, or let the next held fire go."""
        job_id = ar.job.id
        queue = self._held.get(job_id)
        if queue is None:
            return
        if ar.waiting and ar in queue:
            queue.remove(ar)
            ar.waiting = False
        self._next(job_id)

    def _next(self, job_id: str) -> None:
        queue = self._held.get(job_id)
        while queue and queue[0].done:
            queue.popleft()
        if not queue:
            self._held.pop(job_id, None)
            self._stop_watching(job_id)
            return
        if self._blockers.get(job_id) or self._host.in_flight_here(job_id):
            return
        ar = queue.popleft()
        if not queue:
            self._held.pop(job_id, None)
        ar.waiting = False
        ar.buffer_passed = True  # in flight from now: a newer fire waits behind it
        gate = dict(ar.gate or {})
        entry = gate.pop("buffered", None)
        if isinstance(entry, dict):
            gate["buffered_behind"] = entry.get("behind")
            gate["buffered_since"] = entry.get("since")
        ar.gate = gate
        asyncio.get_running_loop().call_soon(self._release, ar)

    def _release(self, ar: ActiveRun) -> None:
        if ar.done:
            self._next(ar.job.id)
            return
        self._host.release(ar)

    # -- runs in flight on other nodes ----------------------------------------

    def _watch_remote(self, job_id: str) -> None:
        if job_id in self._watchers or self._remote is None:
            return
        self._watchers[job_id] = asyncio.get_running_loop().create_task(self._poll(job_id))

    def _stop_watching(self, job_id: str) -> None:
        self._blockers.pop(job_id, None)
        task = self._watchers.pop(job_id, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    async def _poll(self, job_id: str) -> None:
        lookup = self._remote
        assert lookup is not None
        try:
            while self._blockers.get(job_id):
                await asyncio.sleep(REMOTE_POLL)
                try:
                    runs = await lookup(job_id)
                except Exception as exc:  # the database is down: look again later
                    log.debug("runs in flight of job %s not read: %s", job_id, exc)
                    continue
                still = {r.id for r in runs} & self._blockers.get(job_id, set())
                self._blockers[job_id] = still
            self._blockers.pop(job_id, None)
        finally:
            self._watchers.pop(job_id, None)
        self._next(job_id)

    def stop(self) -> None:
        """Stop watching other nodes' runs (the node stops)."""
        for task in list(self._watchers.values()):
            with contextlib.suppress(Exception):
                task.cancel()
        self._watchers.clear()
        self._blockers.clear()


def buffered_error(ar: ActiveRun) -> str:
    """The ``error`` of a held fire's row: why it waits."""
    entry = (ar.gate or {}).get("buffered") or {}
    behind = list(entry.get("behind") or [])
    runs = ", ".join(behind[:3]) + (" …" if len(behind) > 3 else "")
    return f"{BUFFERED_PREFIX}waiting for run {runs} to end ({ar.job.concurrency})"
