"""Claiming a batch of fires: the coordinator lock first, the database fence
behind it (SPEC §6).

``claim_batch`` runs on a worker thread, once per batch (many fires, one
Redis pipeline, one database commit):

1. ``coordinator.claim_fires`` -- losers go on standby (a replica holds
   them; should it not start one by shortly after its due time, the node
   takes it over: ``take_over_batch``). Coordinator unreachable: every fire
   goes on to the fence.
2. ``store.runs.claim_runs`` inserts the winners' run rows (ON CONFLICT DO
   NOTHING) and advances the jobs' cursors in the same transaction; only rows
   actually inserted are dispatched.
   Database unreachable but the lock was won: dispatch anyway; the rows are
   handed to the result writer to go through the fence later. Neither
   reachable: dispatch nothing; the fires are recorded ``skipped`` with an
   error once the database is back (unless a replica fired them).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from cronman.errors import CoordinatorUnavailable, StoreUnavailable
from cronman.ids import run_id_for
from cronman.models import Job, Run
from cronman.timeutil import from_ms, utcnow

log = logging.getLogger(__name__)

# How long a fire lock lives in the coordinator. Replicas claim the same fire
# within well under a second of each other; the lock only has to outlive that
# (and database outages, during which it is the only fence).
LOCK_TTL_MS = 120_000

Cursor = tuple[str, datetime, int]


@dataclass(slots=True)
class Fire:
    """One fire time of one job, on its way from the heap to a target."""

    job: Job
    fire_ms: int
    due_ms: int
    skipped_before: int = 0
    run_id: str = ""
    scheduled_for: datetime = field(default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.scheduled_for is None:
            self.scheduled_for = from_ms(self.fire_ms)
        if not self.run_id:
            self.run_id = run_id_for(self.job.id, self.scheduled_for)


@dataclass(slots=True)
class ClaimResult:
    dispatch: list[Fire] = field(default_factory=list)
    lock_wins: int = 0
    lock_losses: int = 0
    fence_losses: int = 0
    # Dispatched under the coordinator lock alone; rows to write later.
    pending_runs: list[Run] = field(default_factory=list)
    pending_cursors: list[Cursor] = field(default_factory=list)
    # Neither backend reachable: not dispatched, to be recorded.
    unreachable: list[Run] = field(default_factory=list)
    coordinator_error: str | None = None
    store_error: str | None = None
    # In-flight runs of the batch's forbid/replace jobs (other than this batch).
    in_flight: dict[str, list[Run]] = field(default_factory=dict)
    # Lost to a replica's lock: watched until they are due (take_over_batch).
    standby: list[Fire] = field(default_factory=list)


def claimed_run(fire: Fire, node_id: str, now: datetime, lease_until: datetime) -> Run:
    return Run(
        id=fire.run_id, job_id=fire.job.id, scheduled_for=fire.scheduled_for, status="claimed",
        attempt=1, node_id=node_id, origin="schedule", claimed_at=now,
        lease_expires_at=lease_until, skipped_before=fire.skipped_before,
    )


def claim_batch(fires: list[Fire], extra_cursors: list[Cursor], *, coordinator: Any,
                store: Any, node_id: str, lease_seconds: float,
                lock_ttl_ms: int = LOCK_TTL_MS) -> ClaimResult:
    """Claim ``fires`` (see the module docstring); ``extra_cursors`` advance
    jobs whose past fire times were skipped without a run. Never raises for an
    unreachable backend."""
    res = ClaimResult()
    winners = fires
    if fires:
        try:
            won = coordinator.claim_fires([(f.job.id, f.fire_ms) for f in fires], lock_ttl_ms)
            winners = [f for f, w in zip(fires, won, strict=True) if w]
            res.standby = [f for f, w in zip(fires, won, strict=True) if not w]
            res.lock_wins = len(winners)
            res.lock_losses = len(fires) - len(winners)
        except CoordinatorUnavailable as exc:
            res.coordinator_error = str(exc) or "coordinator unavailable"
    now = utcnow()
    lease_until = now + timedelta(seconds=lease_seconds)
    runs = [claimed_run(f, node_id, now, lease_until) for f in winners]
    cursors = [(f.job.id, f.scheduled_for, 0) for f in winners] + list(extra_cursors)
    if not runs and not cursors:
        return res
    try:
        inserted = store.runs.claim_runs(runs, cursors)
    except StoreUnavailable as exc:
        res.store_error = str(exc) or "database unavailable"
        if res.coordinator_error is None:
            res.dispatch = winners
            res.pending_runs = runs
            res.pending_cursors = cursors
        else:
            error = (f"not dispatched: node {node_id} could reach neither the database "
                     f"({res.store_error}) nor the coordinator ({res.coordinator_error})")
            for r in runs:
                r.status = "skipped"
                r.error = error
                r.finished_at = now
                r.lease_expires_at = None
            res.unreachable = runs
        return res
    res.dispatch = [f for f in winners if f.run_id in inserted]
    res.fence_losses = len(winners) - len(res.dispatch)
    guarded = sorted({f.job.id for f in res.dispatch if f.job.concurrency != "allow"})
    if guarded:
        mine = {f.run_id for f in res.dispatch}
        try:
            found = store.runs.in_flight_runs(guarded)
        except StoreUnavailable:
            found = {}
        res.in_flight = {job_id: [r for r in rs if r.id not in mine]
                         for job_id, rs in found.items()}
    return res


@dataclass(slots=True)
class TakeoverResult:
    dispatch: list[Fire] = field(default_factory=list)
    # Taken while the database was down: rows to write later.
    pending_runs: list[Run] = field(default_factory=list)
    coordinator_error: str | None = None
    store_error: str | None = None


def take_over_batch(fires: list[Fire], *, coordinator: Any, store: Any, node_id: str,
                    lease_seconds: float, lock_ttl_ms: int = LOCK_TTL_MS) -> TakeoverResult:
    """Take over standby fires whose lock holder has not started them by now
    (it died or stalled between its claim and the due time; SPEC §6: the
    job's other replica fires it). Runs on the claim thread; never raises for
    an unreachable backend.

    The coordinator decides first (``take_over_fires``: atomic against the
    holder's own ``start_fires``), then the run row: the holder's claimed,
    unstarted row becomes ours (``start_claimed_runs``), or, when the holder
    never wrote one, ours is inserted through the fence. A row someone
    started is left alone and the fire not dispatched. Database unreachable:
    the coordinator lock alone decides; the rows are written later."""
    res = TakeoverResult()
    if not fires:
        return res
    try:
        taken = coordinator.take_over_fires([(f.job.id, f.fire_ms) for f in fires],
                                            lock_ttl_ms)
    except CoordinatorUnavailable as exc:
        res.coordinator_error = str(exc) or "coordinator unavailable"
        return res  # nothing taken: the lease sweeper is the way back
    fires = [f for f, t in zip(fires, taken, strict=True) if t]
    if not fires:
        return res
    now = utcnow()
    lease_until = now + timedelta(seconds=lease_seconds)
    try:
        changed = store.runs.start_claimed_runs(node_id, [(f.run_id, f.scheduled_for)
                                                          for f in fires], now, lease_until)
        missing = [f for f in fires if f.run_id not in changed]
        inserted: set[str] = set()
        if missing:
            inserted = store.runs.claim_runs([claimed_run(f, node_id, now, lease_until)
                                              for f in missing])
            # A row that was not there for the compare-and-set but stopped our
            # insert was being inserted by its holder just then (a slow claim
            # commit): it is there now, claimed and unstarted -- take it.
            late = [(f.run_id, f.scheduled_for) for f in missing if f.run_id not in inserted]
            if late:
                changed |= store.runs.start_claimed_runs(node_id, late, now, lease_until)
    except StoreUnavailable as exc:
        res.store_error = str(exc) or "database unavailable"
        res.dispatch = fires
        res.pending_runs = [claimed_run(f, node_id, now, lease_until) for f in fires]
        return res
    res.dispatch = [f for f in fires if f.run_id in changed or f.run_id in inserted]
    return res
