"""Claiming a batch of fires: the coordinator lock first, the database fence
behind it (SPEC §6).

``claim_batch`` runs on a worker thread, once per batch (many fires, one
Redis pipeline, one database commit):

1. ``coordinator.claim_fires`` -- losers go on standby (a replica holds
   them; should it not start one by shortly after its due time, the node
   takes it over: ``take_over_batch``). Fires refused as too early (this
   host's clock runs ahead of the coordinator's) are watched the same way.
   Coordinator unreachable: every fire goes on to the fence, which then
   refuses rows too far ahead of the database's clock.
2. ``runs.claim_runs`` inserts the winners' run rows (ON CONFLICT DO
   NOTHING) and advances the jobs' cursors in the same transaction; only rows
   actually inserted are dispatched.
   Database unreachable but the lock was won: dispatch anyway; the rows are
   handed to the result writer to go through the fence later. Neither
   reachable: dispatch nothing; the fires are recorded ``skipped`` with an
   error once the database is back (unless a replica fired them).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from cronman.coordination.base import (
    ABSENT,
    CLAIMED,
    HELD,
    HOLDER_ALIVE,
    TAKEN,
    TOO_EARLY,
    Coordinator,
)
from cronman.errors import CoordinatorUnavailable, StoreUnavailable
from cronman.models import Run
from cronman.scheduler.dispatch.in_flight import in_flight_besides
from cronman.scheduler.fires import LOCK_TTL_MS, Cursor, Fire
from cronman.store.base import RunStore

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ClaimResult:
    dispatch: list[Fire] = field(default_factory=list)
    lock_wins: int = 0
    lock_losses: int = 0
    # Refused: further ahead of the reference clock (the coordinator's, or the
    # database's when the fence decides alone) than a claim may be. Watched,
    # not dropped: taken after their due time if no other owner fires them.
    too_early: list[Fire] = field(default_factory=list)
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


def claim_batch(fires: list[Fire], extra_cursors: list[Cursor], *, coordinator: Coordinator,
                runs: RunStore, node_id: str, now: Callable[[], datetime], lease_seconds: float,
                max_ahead_ms: int | None = None,
                lock_ttl_ms: int = LOCK_TTL_MS) -> ClaimResult:
    """Claim ``fires`` (see the module docstring); ``extra_cursors`` advance
    jobs whose past fire times were skipped without a run. Never raises for an
    unreachable backend."""
    res = ClaimResult()
    winners = fires
    if fires:
        try:
            won = coordinator.claim_fires([(f.job.id, f.fire_ms) for f in fires], lock_ttl_ms,
                                          max_ahead_ms=max_ahead_ms)
            winners = [f for f, w in zip(fires, won, strict=True) if w == CLAIMED]
            res.standby = [f for f, w in zip(fires, won, strict=True) if w == HELD]
            res.too_early = [f for f, w in zip(fires, won, strict=True) if w == TOO_EARLY]
            res.lock_wins = len(winners)
            res.lock_losses = len(res.standby)
        except CoordinatorUnavailable as exc:
            res.coordinator_error = str(exc) or "coordinator unavailable"
    at = now()
    lease_until = at + timedelta(seconds=lease_seconds)
    rows = [claimed_run(f, node_id, at, lease_until) for f in winners]
    cursors = [(f.job.id, f.scheduled_for, 0) for f in winners] + list(extra_cursors)
    if not rows and not cursors:
        return res
    try:
        # Without the coordinator the fence decides alone, on the database's clock.
        inserted = runs.claim_runs(rows, cursors, max_ahead_ms=(
            max_ahead_ms if res.coordinator_error is not None else None))
    except StoreUnavailable as exc:
        res.store_error = str(exc) or "database unavailable"
        if res.coordinator_error is None:
            res.dispatch = winners
            res.pending_runs = rows
            res.pending_cursors = cursors
        else:
            error = (f"not dispatched: node {node_id} could reach neither the database "
                     f"({res.store_error}) nor the coordinator ({res.coordinator_error})")
            for r in rows:
                r.status = "skipped"
                r.error = error
                r.finished_at = at
                r.lease_expires_at = None
            res.unreachable = rows
        return res
    res.dispatch = [f for f in winners if f.run_id in inserted]
    res.too_early.extend(f for f in winners if f.run_id in inserted.too_early)
    res.fence_losses = len(winners) - len(res.dispatch) - len(inserted.too_early)
    guarded = sorted({f.job.id for f in res.dispatch if f.job.concurrency != "allow"})
    if guarded:
        res.in_flight = in_flight_besides(runs, guarded, {f.run_id for f in res.dispatch})
    return res


@dataclass(slots=True)
class TakeoverResult:
    dispatch: list[Fire] = field(default_factory=list)
    # Claimed by a holder that is alive and not started yet: ask again later.
    watching: list[Fire] = field(default_factory=list)
    # Taken while the database was down: rows to write later.
    pending_runs: list[Run] = field(default_factory=list)
    # Run ids of ``dispatch`` whose start nothing records yet (a row inserted
    # here, or a lock just claimed): they are marked started at their due
    # time like a claim. The others' start is recorded already: the lock
    # reads started by this node, or the holder's row was started by the
    # compare-and-set.
    unstarted: set[str] = field(default_factory=set)
    coordinator_error: str | None = None
    store_error: str | None = None


def take_over_batch(fires: list[Fire], *, coordinator: Coordinator, runs: RunStore, node_id: str,
                    now: Callable[[], datetime], lease_seconds: float,
                    alive: Collection[str] = (), claim_absent: bool = False,
                    lock_ttl_ms: int = LOCK_TTL_MS) -> TakeoverResult:
    """Take over fires a replica claimed but has not started, unless it is
    ``alive`` (SPEC §6: when a node dies, its job's other replica fires it; a
    node that is merely late is left to start its fires itself). With
    ``claim_absent``, fires nobody claimed are claimed here: this node
    watched them as their second owner. Runs on the claim thread; never
    raises for an unreachable backend.

    The coordinator decides first (``take_over_fires``: atomic against the
    holder's own ``start_fires``), then the run row: the holder's claimed,
    unstarted row becomes ours (``start_claimed_runs``), or, when the holder
    never wrote one, ours is inserted through the fence. A row someone
    started is left alone and the fire not dispatched. Coordinator
    unreachable: only fires watched as second owner go on, and the run row
    decides alone. Database unreachable: the coordinator lock alone decides;
    the rows are written later. Neither: nothing is taken; the fires are
    watched again."""
    res = TakeoverResult()
    if not fires:
        return res
    try:
        answers = coordinator.take_over_fires([(f.job.id, f.fire_ms) for f in fires],
                                              lock_ttl_ms, alive=alive,
                                              report_absent=claim_absent)
    except CoordinatorUnavailable as exc:
        res.coordinator_error = str(exc) or "coordinator unavailable"
        if not claim_absent:
            return res  # nothing taken: the lease sweeper is the way back
        answers = [ABSENT] * len(fires)
    res.watching = [f for f, a in zip(fires, answers, strict=True) if a == HOLDER_ALIVE]
    # Taken from a holder that never started them: its claim row, if any, is
    # taken over by compare-and-set. Without a lock: a row, if one exists, is
    # somebody's whose start nobody can vouch for (Redis lost the lock, or
    # cannot be read), so only a new row goes through the fence.
    taken = [f for f, a in zip(fires, answers, strict=True) if a == TAKEN]
    unclaimed = [f for f, a in zip(fires, answers, strict=True) if a == ABSENT]
    if not taken and not unclaimed:
        return res
    at = now()
    lease_until = at + timedelta(seconds=lease_seconds)
    changed: set[str] = set()
    inserted: set[str] = set()
    try:
        if taken:
            changed = runs.start_claimed_runs(node_id, [(f.run_id, f.scheduled_for)
                                                        for f in taken], at, lease_until)
        missing = [f for f in taken if f.run_id not in changed] + unclaimed
        if missing:
            inserted = runs.claim_runs([claimed_run(f, node_id, at, lease_until)
                                        for f in missing],
                                       [(f.job.id, f.scheduled_for, 0) for f in missing])
            # A row of a taken fire that was not there for the compare-and-set
            # but stopped our insert was being inserted by its holder just then
            # (a slow claim commit): it is there now, claimed and unstarted.
            late = [(f.run_id, f.scheduled_for) for f in taken
                    if f.run_id not in changed and f.run_id not in inserted]
            if late:
                changed |= runs.start_claimed_runs(node_id, late, at, lease_until)
    except StoreUnavailable as exc:
        res.store_error = str(exc) or "database unavailable"
        if res.coordinator_error is not None:
            res.watching.extend(taken + unclaimed)  # neither backend decided
            return res
        # The coordinator lock alone decides: a fire without one is claimed
        # there first (one of its owners may claim it at the same moment).
        locked = _claim_locks(coordinator, unclaimed, lock_ttl_ms) if unclaimed else []
        claimed = [f for f, ok in zip(unclaimed, locked, strict=True) if ok]
        res.dispatch = taken + claimed
        res.unstarted = {f.run_id for f in claimed}
        res.watching.extend(f for f, ok in zip(unclaimed, locked, strict=True) if not ok)
        res.pending_runs = [claimed_run(f, node_id, at, lease_until) for f in res.dispatch]
        return res
    res.dispatch = [f for f in taken + unclaimed if f.run_id in changed or f.run_id in inserted]
    res.unstarted = set(inserted)
    return res


def _claim_locks(coordinator: Coordinator, fires: list[Fire], ttl_ms: int) -> list[bool]:
    """Claim the coordinator locks of ``fires`` (False where another holder has
    one, or the coordinator cannot be reached)."""
    try:
        won = coordinator.claim_fires([(f.job.id, f.fire_ms) for f in fires], ttl_ms)
    except CoordinatorUnavailable:
        return [False] * len(fires)
    return [w == CLAIMED for w in won]
