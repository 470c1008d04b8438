"""The gates of a fire: what a scheduled fire (or a run an upstream's success
made) must pass right before its first attempt, beside ``admission``.

- **Exclusion calendars** (``Job.calendars``): a fire whose local date in a
  calendar's zone is one of its dates is recorded ``skipped``, its error and
  ``gate`` naming the calendar. Calendars are held in memory
  (``CalendarBook``): no I/O on the event loop.
- **Dependencies** (``Job.depends_on``): a fire at T runs only when each
  upstream job has a ``succeeded`` run scheduled in [T - within, T]. If one
  has not, the fire waits -- marked started (no replica takes it over), its
  lease renewed like any held run, out of the node's progress watermark --
  polling nothing: the success of an upstream is announced on the change
  feed (``*ok:<job id>``, in the transaction that writes it) and wakes its
  waiters, who look again. A fire whose stale upstream's ``wait`` has run
  out (counted from its due time) is looked at a last time (an announcement
  lost with a feed connection costs a late start, not a skip), then recorded
  ``skipped`` naming the stale upstream. A node that dies while a fire waits
  leaves its lease to expire: the sweeper's node takes the run and waits
  again, until the same deadline.

The run's ``gate`` records what was found: ``depends_on`` (the fresh
upstream runs), ``waited_for`` and ``waited_ms``, ``stale``, ``calendar``;
runs made by a trigger carry ``upstream`` (the runs they consumed) from
their start (:mod:`cronman.store.triggers`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from cronman.errors import StoreUnavailable
from cronman.models import Job, Run
from cronman.scheduler.fires import ActiveRun
from cronman.scheduler.jobs.source import JobSource
from cronman.scheduler.runtime.clock import ReferenceClock
from cronman.scheduler.runtime.lifecycle import Pool
from cronman.store.base import CALENDARS_CHANGED, UPSTREAM_SUCCEEDED
from cronman.store.triggers import upstream_entry
from cronman.timeutil import format_rfc3339, from_ms, to_ms
from cronman.vocabulary import DEFAULT_DEPENDENCY_WAIT, GATED_ORIGINS

log = logging.getLogger(__name__)

# While the database cannot say whether upstreams are fresh: look again after
# this many seconds, doubling up to the maximum.
RETRY_MIN = 0.5
RETRY_MAX = 10.0


class CalendarLookup(Protocol):
    def excluding(self, job: Job, fire_ms: int) -> str | None:
        """The job's calendar (as the job names it) whose dates hold the fire
        at ``fire_ms``, or None."""


class UpstreamRuns(Protocol):
    def fresh_upstream_runs(self, windows: Sequence[tuple[str, datetime, datetime]]
                            ) -> dict[str, Run]:
        """Per (job id, since, until): its latest succeeded run scheduled in the window."""


class WaitNotes(Protocol):
    """Told when a run starts waiting for its upstream jobs (the dispatcher)."""

    def note_waiting(self, ar: ActiveRun, gate: dict[str, Any]) -> None:
        """``ar`` waits for the upstream jobs ``gate`` names (its row says so)."""


class GateKeeper(Protocol):
    """What the dispatcher asks of the gates (``FireGates``)."""

    def excluded(self, ar: ActiveRun) -> GateVerdict | None:
        """A skip when an exclusion calendar holds the fire's date, else None."""

    def must_wait(self, ar: ActiveRun) -> bool:
        """Whether the run's upstream jobs must be looked at before it starts."""

    async def wait(self, ar: ActiveRun, notes: WaitNotes) -> GateVerdict:
        """Until the run may go, or must be skipped."""


@dataclass(frozen=True, slots=True)
class GateVerdict:
    """Go, or skip with ``error``; ``gate`` is what the run records."""

    go: bool
    error: str | None = None
    gate: dict[str, Any] | None = None


def gated(ar: ActiveRun) -> bool:
    """Whether the run passes the gates: a first attempt of a schedule's fire
    or of a trigger's run (manual runs do not)."""
    return (ar.origin in GATED_ORIGINS and ar.attempt_started_ms is None
            and ar.started_at is None)


class FireGates:
    """Exclusion calendars and dependencies, for the dispatcher."""

    def __init__(self, calendars: CalendarLookup, upstream: UpstreamRuns, jobs: JobSource, *,
                 clock: ReferenceClock, pool: Pool) -> None:
        self._calendars = calendars
        self._upstream = upstream
        self._jobs = jobs
        self._clock = clock
        self._pool = pool
        self._listeners: dict[str, set[asyncio.Future[None]]] = {}

    # -- calendars ----------------------------------------------------------

    def excluded(self, ar: ActiveRun) -> GateVerdict | None:
        """A skip when one of the job's calendars holds the fire's date."""
        if not ar.job.calendars or not gated(ar):
            return None
        name = self._calendars.excluding(ar.job, to_ms(ar.scheduled_for))
        if name is None:
            return None
        return GateVerdict(False, f"excluded by calendar {name!r}: "
                                  f"{format_rfc3339(ar.scheduled_for)} falls on one of its "
                                  "dates", {**(ar.gate or {}), "calendar": name})

    # -- dependencies -------------------------------------------------------

    def must_wait(self, ar: ActiveRun) -> bool:
        """Whether the run's upstreams must be looked at before it starts."""
        return bool(ar.job.depends_on) and not ar.gate_passed and gated(ar)

    def upstream_succeeded(self, job_id: str) -> None:
        """A run of ``job_id`` succeeded (heard on the feed): wake its waiters."""
        for fut in self._listeners.pop(job_id, ()):
            if not fut.done():
                fut.set_result(None)

    async def wait(self, ar: ActiveRun, notes: WaitNotes) -> GateVerdict:
        """Until every upstream of the run is fresh (go) or one's wait runs
        out (skip). ``notes`` is told once, when the run starts waiting."""
        deps = list(ar.job.depends_on or ())
        t = ar.scheduled_for
        windows = [(str(d["job"]), t - timedelta(seconds=float(d["within"])), t) for d in deps]
        deadline = {str(d["job"]): ar.due_ms + int(float(d.get("wait", DEFAULT_DEPENDENCY_WAIT))
                                                   * 1000) for d in deps}
        ids = sorted(deadline)
        base = dict(ar.gate or {})  # what the run carried in (a trigger's upstream runs)
        began = self._clock.now_ms()
        waited: list[str] = []
        retry = RETRY_MIN
        while True:
            wake = self._listen(ids)
            try:
                try:
                    found: dict[str, Run] | None = await self._pool(
                        self._upstream.fresh_upstream_runs, windows)
                    retry = RETRY_MIN
                except StoreUnavailable as exc:
                    found, problem = None, str(exc)
                now = self._clock.now_ms()
                if found is not None:
                    stale = [job_id for job_id in ids if job_id not in found]
                    if not stale:
                        return self._go(base, found, waited, now - began)
                    expired = [job_id for job_id in stale if now >= deadline[job_id]]
                    if expired:
                        return await self._skip(ar, base, deps, expired, waited,
                                                now - began)
                    if not waited:
                        notes.note_waiting(ar, {**base, "waiting_for": stale,
                                                "waiting_since": format_rfc3339(from_ms(now))})
                    waited.extend(j for j in stale if j not in waited)
                    timeout = (min(deadline[j] for j in stale) - now) / 1000.0
                else:
                    if now >= max(deadline.values()):
                        return GateVerdict(False, "its upstream jobs could not be checked "
                                                  f"before its wait ran out: {problem}",
                                           {**base, "waited_for": ids})
                    timeout = min(retry, (max(deadline.values()) - now) / 1000.0)
                    retry = min(RETRY_MAX, retry * 2)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(wake), max(0.0, timeout))
            finally:
                self._unlisten(ids, wake)

    def _listen(self, ids: list[str]) -> asyncio.Future[None]:
        """One future woken by the success of any of ``ids`` (registered
        before the look, so a success between the two is not missed)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for job_id in ids:
            self._listeners.setdefault(job_id, set()).add(fut)
        return fut

    def _unlisten(self, ids: list[str], fut: asyncio.Future[None]) -> None:
        for job_id in ids:
            waiters = self._listeners.get(job_id)
            if waiters is not None:
                waiters.discard(fut)
                if not waiters:
                    del self._listeners[job_id]

    def _go(self, base: dict[str, Any], found: dict[str, Run], waited: list[str],
            waited_ms: int) -> GateVerdict:
        gate = {**base, "depends_on": [
            upstream_entry(r.id, r.job_id, r.scheduled_for, r.attempt)
            for r in sorted(found.values(), key=lambda r: r.job_id)]}
        if waited:
            gate.update(waited_for=waited, waited_ms=max(0, waited_ms))
        return GateVerdict(True, gate=gate)

    async def _skip(self, ar: ActiveRun, base: dict[str, Any], deps: list[dict[str, Any]],
                    stale: list[str], waited: list[str], waited_ms: int) -> GateVerdict:
        try:
            jobs = await self._jobs.jobs_of(stale)
        except StoreUnavailable:
            jobs = {}
        within = {str(d["job"]): d["within"] for d in deps}
        parts = []
        for job_id in stale:
            job = jobs.get(job_id)
            label = job_id if job is None else f"{job.namespace}/{job.name} ({job_id})"
            gone = " (deleted)" if job is not None and job.deleted_at is not None else ""
            parts.append(f"{label}{gone} had no succeeded run scheduled within "
                         f"{within[job_id]:g} s before {format_rfc3339(ar.scheduled_for)}")
        gate = {**base, "stale": stale}
        if waited:
            gate.update(waited_for=waited, waited_ms=max(0, waited_ms))
        return GateVerdict(False, f"upstream {'; '.join(parts)}; waited "
                                  f"{max(0, waited_ms) / 1000:.1f} s", gate)


class Rereadable(Protocol):
    def kick(self) -> None:
        """What it holds changed (announced): read it again."""


def route_signal(item: str, gates: FireGates, calendars: Rereadable) -> None:
    """What the node does with a workflow announcement of the feed (``JobEvents.announced``)."""
    if item.startswith(UPSTREAM_SUCCEEDED):
        gates.upstream_succeeded(item[len(UPSTREAM_SUCCEEDED):])
    elif item == CALENDARS_CHANGED:
        calendars.kick()
