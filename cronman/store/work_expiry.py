"""What runs out on the work queues (``WorkQueueStore.expire``), in one
transaction: rows are taken ``FOR UPDATE SKIP LOCKED`` (another node's
pass, or a worker's report, has the rest), and each is moved only from the
state it was read in.

- held past its timeout deadline: ``failed`` ("timed out after N s"),
  whatever its heartbeats;
- held past its lease: ``failed`` ("cancelled") when a cancel was asked;
  else under ``at_most_once`` ``lost``, under ``at_least_once`` a failed
  attempt ("lease lost: ...") the retry policy counts: queued again, or
  ``failed`` once attempts are used up;
- an http target's item (``"completion": "callback"``) is never queued: a
  failed attempt with retries left leaves its run ``retrying`` for a node's
  lease sweeper to send again (``work_runs``);
- queued while its job was deleted: ``failed`` ("job deleted before a
  worker claimed attempt N"; a held one goes on: its worker has it);
- queued with a capacity rule and past its wait: a failed attempt ("waiting
  for capacity on queue Q: I of N idle"), retried or failed as the job says.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, exists, select
from sqlalchemy.engine import Row

from cronman.store.dialect import for_update_skip_locked
from cronman.store.engine import Tx
from cronman.store.tables import jobs
from cronman.store.tables import work_items as wi
from cronman.store.work_records import ExpiryReport
from cronman.store.work_runs import fail_attempt, finish, idle_window, idle_workers
from cronman.vocabulary import DeliveryMode, RunStatus, WorkKind, WorkState

HELD = WorkState.HELD.value
QUEUED = WorkState.QUEUED.value


def expire_items(tx: Tx, now: datetime, limit: int, *,
                 deleted_jobs: bool = True) -> ExpiryReport:
    """One pass (``deleted_jobs``: look for queued runs of deleted jobs too)."""
    report = ExpiryReport()
    for row in _pick(tx, and_(wi.c.state == HELD, wi.c.deadline_at < now), limit):
        finish(tx, row, RunStatus.FAILED, now, error=f"timed out after {row.timeout} s")
        report.count("timeout", "failed")
    for row in _pick(tx, and_(wi.c.state == HELD, wi.c.lease_expires_at < now), limit):
        _lease_lost(tx, row, now, report)
    if deleted_jobs:
        gone = and_(wi.c.state == QUEUED, exists(select(jobs.c.id).where(
            jobs.c.id == wi.c.job_id, jobs.c.deleted_at.is_not(None))))
        for row in _pick(tx, gone, limit):
            finish(tx, row, RunStatus.FAILED, now, error="job deleted before a worker "
                                                         f"claimed attempt {row.attempt}")
            report.count("deleted", "failed")
    waiting = and_(wi.c.state == QUEUED, wi.c.capacity_idle.is_not(None),
                   wi.c.available_at < now)
    for row in _pick(tx, waiting, limit, wi.c.available_at):
        if row.available_at + timedelta(seconds=int(row.capacity_wait or 0)) >= now:
            continue
        idle = idle_workers(tx.conn, row.namespace, row.queue,
                            now - idle_window(int(row.heartbeat_timeout)))
        if idle >= row.capacity_idle:
            continue  # room now: the next claim takes it
        outcome, _ = fail_attempt(tx, row, now, f"waiting for capacity on queue {row.queue}: "
                                                f"{idle} of {row.capacity_idle} idle")
        report.count("capacity", "failed" if outcome == "ended" else "requeued")
    return report


def _pick(tx: Tx, where: Any, limit: int, order: Any = wi.c.run_id) -> list[Row[Any]]:
    stmt = for_update_skip_locked(select(wi).where(where).order_by(order).limit(limit),
                                  tx.dialect)
    return list(tx.conn.execute(stmt).all())


def _lease_lost(tx: Tx, row: Row[Any], now: datetime, report: ExpiryReport) -> None:
    if row.cancel_requested:
        reason = row.cancel_reason
        finish(tx, row, RunStatus.FAILED, now,
               error="cancelled" + (f": {reason}" if reason else ""))
        report.count("cancelled", "failed")
        return
    holder = (f"the receiver ({row.worker_id})" if row.kind == WorkKind.HTTP
              else f"worker {row.worker_id}")
    error = f"lease lost: no heartbeat for {row.heartbeat_timeout} s from {holder}"
    if row.delivery == DeliveryMode.AT_MOST_ONCE:
        finish(tx, row, RunStatus.LOST, now, error=error)
        report.count("lease", "lost")
        return
    outcome, _ = fail_attempt(tx, row, now, error)
    report.count("lease", "failed" if outcome == "ended" else "requeued")
