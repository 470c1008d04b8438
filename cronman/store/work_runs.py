"""How a work item's transitions reach its run row and its worker's row:
the shared steps of ``work_queue`` (the calls of workers and the API) and
``work_expiry`` (what runs out), each inside the caller's transaction.

The run row of an item is ``running`` or ``retrying`` with no node; these
writes touch it only while the item is there (the caller holds the item's
row lock), so a final status is written once.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.engine import Row

from cronman.models import Run
from cronman.retries import next_retry_delay
from cronman.store.codec import run_from_row, storable
from cronman.store.engine import Tx
from cronman.store.run_policies import RunEnd, count_ends
from cronman.store.tables import jobs
from cronman.store.tables import scheduled_jobs as sj
from cronman.store.tables import work_items as wi
from cronman.store.tables import work_workers as ww
from cronman.store.triggers import SucceededRun, SuccessHook
from cronman.store.work_records import WorkItem, WorkOrder
from cronman.vocabulary import RunStatus, WorkKind, WorkState

# Columns of a work item that are WorkItem fields (the rest stay in the store).
ITEM_FIELDS = ("run_id", "scheduled_for", "job_id", "namespace", "queue", "priority", "due_at",
               "available_at", "attempt", "state", "payload", "heartbeat_timeout", "timeout",
               "deadline_at", "capacity_idle", "capacity_wait", "worker_id", "claimed_at",
               "lease_expires_at", "last_heartbeat", "progress", "percent", "cancel_requested",
               "heartbeats", "output", "traceparent", "tracestate")
# An item whose run ended failed or lost, kept until a node has sent it to
# the job's dead letter (not a ``WorkState``: it is with no queue any more).
ENDED = "ended"
# The states of an item that is with its queue.
LIVE_STATES = (WorkState.QUEUED.value, WorkState.HELD.value)
# A worker counts as seen for this many times the queue's heartbeat period,
# and at least this many seconds (an idle worker's long-polls come every 30 s).
IDLE_PERIODS = 2
MIN_IDLE_WINDOW = 30
# Who holds the run row of an http target's attempt that failed through its
# completion lease until a lease sweeper takes it (no node has this id).
REDISPATCH_NODE = "work-queue"
# Bounds of what a worker reports (the API checks them; the store keeps to them).
MAX_ERROR_CHARS = 4096
# work_items.traceparent / tracestate (W3C: 55 characters; 512 at most).
TRACEPARENT_CHARS = 64
TRACESTATE_CHARS = 512


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def item_from_row(row: Row[Any], state: str | None = None,
                  idle_workers: int | None = None) -> WorkItem:
    m = row._mapping
    values = {name: m[name] for name in ITEM_FIELDS}
    values["cancel_requested"] = bool(values["cancel_requested"])
    if state is not None:
        values["state"] = state
    return WorkItem(**values, idle_workers=idle_workers)


def trace_columns(order: WorkOrder) -> dict[str, str]:
    """The order's trace context as the item's columns (values within their bounds)."""
    bounds = {"traceparent": TRACEPARENT_CHARS, "tracestate": TRACESTATE_CHARS}
    return {name: value for name, value in order.trace
            if name in bounds and 0 < len(value) <= bounds[name]}


def idle_window(heartbeat_timeout: int) -> timedelta:
    return timedelta(seconds=max(MIN_IDLE_WINDOW, IDLE_PERIODS * heartbeat_timeout))


def idle_workers(tx_conn: Any, namespace: str, queue: str, seen_since: datetime) -> int:
    """Workers of the queue seen since then holding fewer runs than their slots."""
    return int(tx_conn.execute(
        select(func.count()).select_from(ww)
        .where(ww.c.namespace == namespace, ww.c.queue == queue,
               ww.c.last_seen >= seen_since, ww.c.held < ww.c.slots)).scalar_one())


def release_worker(tx: Tx, namespace: str, queue: str, worker_id: str | None) -> None:
    """The worker holds one run less."""
    if worker_id is None:
        return
    tx.conn.execute(update(ww).where(ww.c.namespace == namespace, ww.c.queue == queue,
                                     ww.c.worker_id == worker_id, ww.c.held > 0)
                    .values(held=ww.c.held - 1))


def _run_key(m: Any) -> list[Any]:
    return [sj.c.id == m["run_id"], sj.c.scheduled_for == m["scheduled_for"]]


def finish(tx: Tx, item: Row[Any], status: str, now: datetime, *,
           result: dict[str, Any] | None = None, error: str | None = None,
           hook: SuccessHook | None = None) -> Run | None:
    """End the item's run with ``status`` and drop the item (the run row
    changes only while it has no node: a worker run's)."""
    m = item._mapping
    claimed = m["claimed_at"]
    duration = None if claimed is None else int((now - claimed).total_seconds() * 1000)
    if m["worker_id"] is not None:
        result = {**(result or {}), "worker_id": m["worker_id"]}
    values: dict[str, Any] = {
        "status": status, "finished_at": now, "result": storable(result),
        "error": None if error is None else storable(error[:MAX_ERROR_CHARS]),
        "lease_expires_at": None, "next_attempt_at": None, "attempt": m["attempt"]}
    if duration is not None:
        values["duration_ms"] = duration
    row = tx.conn.execute(update(sj).where(*_run_key(m), sj.c.node_id.is_(None))
                          .values(**values).returning(*sj.c)).first()
    if status in (RunStatus.FAILED, RunStatus.LOST) and _has_dead_letter(tx, m["job_id"]):
        # Kept, ended, for a node to send the run to the job's dead letter (take_ended).
        tx.conn.execute(update(wi).where(wi.c.run_id == m["run_id"]).values(
            state=ENDED, lease_token_hash=None, lease_expires_at=None, deadline_at=None))
    else:
        tx.conn.execute(delete(wi).where(wi.c.run_id == m["run_id"]))
    if m["state"] == WorkState.HELD:
        release_worker(tx, m["namespace"], m["queue"], m["worker_id"])
    if row is None:
        return None
    # Counted for the job's breaker and run limit as a node's write of a run's end is.
    count_ends(tx, [RunEnd(m["job_id"], m["scheduled_for"], status, values["error"])])
    if status == RunStatus.SUCCEEDED and hook is not None:
        hook(tx, [SucceededRun(m["run_id"], m["job_id"], m["scheduled_for"], m["attempt"])])
    return run_from_row(row)


def _has_dead_letter(tx: Tx, job_id: str) -> bool:
    found = tx.conn.execute(select(jobs.c.dead_letter).where(jobs.c.id == job_id)).first()
    return found is not None and found[0] is not None


def fail_attempt(tx: Tx, item: Row[Any], now: datetime, error: str, *,
                 result: dict[str, Any] | None = None, retryable: bool = True,
                 final_status: str = RunStatus.FAILED) -> tuple[str, Run | None]:
    """A failed attempt: queued again as the next attempt after the job's
    retry backoff (``requeued``), or the run ends ``final_status``."""
    m = item._mapping
    delay = next_retry_delay(int(m["attempt"]), m["retry"], retryable)
    if delay is None:
        return "ended", finish(tx, item, final_status, now, result=result, error=error)
    available = now + timedelta(seconds=delay)
    if m["kind"] == WorkKind.HTTP:
        return "redispatched", _redispatch(tx, item, available, error, result)
    tx.conn.execute(update(wi).where(wi.c.run_id == m["run_id"]).values(
        state=WorkState.QUEUED.value, attempt=m["attempt"] + 1, available_at=available,
        lease_token_hash=None, worker_id=None, claimed_at=None, lease_expires_at=None,
        last_heartbeat=None, deadline_at=None, progress=None, percent=None,
        heartbeats=0, output=None,
        last_error=error[:MAX_ERROR_CHARS]))
    if m["state"] == WorkState.HELD:
        release_worker(tx, m["namespace"], m["queue"], m["worker_id"])
    if m["worker_id"] is not None:
        result = {**(result or {}), "worker_id": m["worker_id"]}
    row = tx.conn.execute(update(sj).where(*_run_key(m), sj.c.node_id.is_(None)).values(
        status=RunStatus.RETRYING.value, attempt=m["attempt"], next_attempt_at=available,
        result=storable(result), error=storable(error[:MAX_ERROR_CHARS]),
        lease_expires_at=available).returning(*sj.c)).first()
    return "requeued", None if row is None else run_from_row(row)


def _redispatch(tx: Tx, item: Row[Any], available: datetime, error: str,
                result: dict[str, Any] | None) -> Run | None:
    """An http target's failed attempt with retries left: its item goes, and
    its run row waits, ``retrying``, under a lease that ends when the retry is
    due and held by ``REDISPATCH_NODE`` (no live node): a node's lease sweeper
    then takes it and sends the request again as the next attempt."""
    m = item._mapping
    tx.conn.execute(delete(wi).where(wi.c.run_id == m["run_id"]))
    if m["worker_id"] is not None:
        result = {**(result or {}), "worker_id": m["worker_id"]}
    row = tx.conn.execute(update(sj).where(*_run_key(m), sj.c.node_id.is_(None)).values(
        node_id=REDISPATCH_NODE, status=RunStatus.RETRYING.value, attempt=m["attempt"],
        next_attempt_at=available, result=storable(result),
        error=storable(error[:MAX_ERROR_CHARS]), lease_expires_at=available)
        .returning(*sj.c)).first()
    return None if row is None else run_from_row(row)
