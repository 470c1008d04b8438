"""The work queues of ``worker`` targets: ``SqlWorkQueue`` (the Store's
``work``, contract ``base.WorkQueueStore``).

A run handed to its queue is one ``work_items`` row (queued, or held by a
worker under a lease) beside its run row, which is ``running`` (or
``retrying`` between attempts) with no node: no sweeper takes it, and a
node's late writes, fenced on the node, cannot touch it. Claims lock the
queue's next row and skip rows others lock (``FOR UPDATE SKIP LOCKED`` on
PostgreSQL; SQLite's writers are serialised), so no two workers hold one
run. Heartbeats, reports and cancels go by (run id, SHA-256 of the lease
token), each one transaction; a run's final status is written in the
transaction that drops its item (``work_runs``), so it is written once.
What runs out is ``work_expiry``'s; waking long-polls, ``work_signals``'.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Integer, and_, case, cast, delete, func, insert, or_, select, update
from sqlalchemy.engine import Row

from cronman.errors import NotFound, StaleLease
from cronman.models import Run
from cronman.store.codec import run_from_row, storable
from cronman.store.dialect import for_update_skip_locked, upsert
from cronman.store.engine import Database, Tx
from cronman.store.tables import IN_FLIGHT_STATUSES
from cronman.store.tables import scheduled_jobs as sj
from cronman.store.tables import work_items as wi
from cronman.store.tables import work_workers as ww
from cronman.store.triggers import SuccessHook
from cronman.store.work_expiry import expire_items
from cronman.store.work_records import (
    Claim,
    ExpiryReport,
    HeartbeatAck,
    QueueStats,
    WorkerSeen,
    WorkItem,
    WorkOrder,
)
from cronman.store.work_runs import (
    ENDED,
    LIVE_STATES,
    fail_attempt,
    finish,
    idle_window,
    idle_workers,
    item_from_row,
    token_hash,
    trace_columns,
)
from cronman.store.work_signals import WorkSignals
from cronman.timeutil import utcnow
from cronman.vocabulary import RunStatus, WorkKind, WorkState

# Candidates a claim looks at (the first whose capacity holds and that no
# other claim has locked wins; only that row is locked).
CLAIM_PICK = 16
# Workers not seen for this long are dropped from the queue's list.
WORKER_FORGET = timedelta(days=1)
FORGET_INTERVAL = 60.0
# How often the expiry looks for queued runs of deleted jobs.
DELETED_CHECK_INTERVAL = 10.0
# Workers listed with a queue: those seen this recently.
WORKER_LISTED = timedelta(minutes=10)


class SqlWorkQueue:
    """Work queues on one database (see the module docstring)."""

    def __init__(self, db: Database, on_succeeded: SuccessHook | None = None,
                 signals: WorkSignals | None = None) -> None:
        self._db = db
        self._on_succeeded = on_succeeded
        self.signals = signals or WorkSignals(db)
        self._next_forget = 0.0
        self._next_deleted_check = 0.0

    # -- the scheduler's hand-off -----------------------------------------

    def enqueue(self, order: WorkOrder) -> bool:
        """See ``WorkQueueStore.enqueue``."""
        now = utcnow()

        def fn(tx: Tx) -> bool:
            found = tx.conn.execute(select(wi.c.state).where(wi.c.run_id == order.run_id)
                                    .with_for_update()).first()
            if found is not None and found[0] == ENDED:  # a replay; its dead letter is moot
                tx.conn.execute(delete(wi).where(wi.c.run_id == order.run_id))
                found = None
            if found is not None:
                # Queued already (a re-dispatch finds its item): the row is the queue's.
                tx.conn.execute(update(sj).where(*_held_by(order))
                                .values(node_id=None, lease_expires_at=None))
                return True
            moved = tx.conn.execute(
                update(sj).where(*_held_by(order))
                .values(node_id=None, status=RunStatus.RUNNING.value, attempt=order.attempt,
                        started_at=func.coalesce(sj.c.started_at, now),
                        # The dispatch's lateness, as for any run: hand-off minus due time.
                        lateness_ms=func.coalesce(sj.c.lateness_ms, max(0, int(
                            (now - order.due_at).total_seconds() * 1000))),
                        lease_expires_at=None)).rowcount
            if not moved:
                return False
            tx.conn.execute(insert(wi).values(
                run_id=order.run_id, scheduled_for=order.scheduled_for, job_id=order.job_id,
                namespace=order.namespace, queue=order.queue, priority=order.priority,
                due_at=order.due_at, available_at=order.due_at, enqueued_at=now,
                attempt=order.attempt, state=WorkState.QUEUED.value,
                payload=storable(order.payload), heartbeat_timeout=order.heartbeat_timeout,
                timeout=order.timeout, capacity_idle=order.capacity_idle,
                capacity_wait=order.capacity_wait, delivery=order.delivery,
                retry=dict(order.retry), cancel_requested=False, **trace_columns(order)))
            self.signals.announce(tx, order.namespace, order.queue)
            return True

        return self._db.write(fn)

    # -- an http target's completion by callback ------------------------------

    def hold(self, order: WorkOrder, holder: str, token: str, *, first_lease: int) -> bool:
        """See ``WorkQueueStore.hold``."""
        now = utcnow()

        def fn(tx: Tx) -> bool:
            found = tx.conn.execute(select(wi.c.state).where(wi.c.run_id == order.run_id)
                                    .with_for_update()).first()
            if found is not None and found[0] != ENDED:
                return False  # with its queue already: not this node's to send
            if found is not None:  # a replay; its dead letter is moot
                tx.conn.execute(delete(wi).where(wi.c.run_id == order.run_id))
            lease = now + timedelta(seconds=first_lease)
            moved = tx.conn.execute(
                update(sj).where(*_held_by(order))
                .values(node_id=None, status=RunStatus.RUNNING.value, attempt=order.attempt,
                        started_at=func.coalesce(sj.c.started_at, now),
                        lateness_ms=func.coalesce(sj.c.lateness_ms, max(0, int(
                            (now - order.due_at).total_seconds() * 1000))),
                        lease_expires_at=lease, next_attempt_at=None)).rowcount
            if not moved:
                return False
            tx.conn.execute(insert(wi).values(
                run_id=order.run_id, scheduled_for=order.scheduled_for, job_id=order.job_id,
                namespace=order.namespace, queue=order.queue, priority=order.priority,
                due_at=order.due_at, available_at=now, enqueued_at=now, attempt=order.attempt,
                state=WorkState.HELD.value, kind=WorkKind.HTTP.value, payload=None,
                heartbeat_timeout=order.heartbeat_timeout, timeout=order.timeout,
                delivery=order.delivery, retry=dict(order.retry), cancel_requested=False,
                lease_token_hash=token_hash(token), worker_id=holder, claimed_at=now,
                lease_expires_at=lease, last_heartbeat=now,
                deadline_at=now + timedelta(seconds=order.timeout), **trace_columns(order)))
            return True

        return self._db.write(fn)

    def release(self, run_id: str, scheduled_for: datetime, token: str, *, node_id: str,
                lease_until: datetime) -> bool:
        """See ``WorkQueueStore.release``."""

        def fn(tx: Tx) -> bool:
            gone = tx.conn.execute(delete(wi).where(
                wi.c.run_id == run_id, wi.c.state == WorkState.HELD.value,
                wi.c.lease_token_hash == token_hash(token))).rowcount
            if not gone:
                return False
            tx.conn.execute(update(sj).where(sj.c.id == run_id,
                                             sj.c.scheduled_for == scheduled_for,
                                             sj.c.node_id.is_(None))
                            .values(node_id=node_id, lease_expires_at=lease_until))
            return True

        return self._db.write(fn)

    # -- a worker's calls ---------------------------------------------------

    def claim(self, namespace: str, queue: str, worker_id: str, *, slots: int,
              now: datetime, seen: bool = True) -> Claim | None:
        """See ``WorkQueueStore.claim``."""
        token = secrets.token_urlsafe(32)
        claimable = (wi.c.namespace == namespace, wi.c.queue == queue,
                     wi.c.state == WorkState.QUEUED.value, wi.c.available_at <= now)
        if not seen:
            # A long-poll's next look: no write (and on SQLite no write lock) for nothing.
            with self._db.read() as conn:
                if conn.execute(select(wi.c.run_id).where(*claimable).limit(1)).first() is None:
                    return None

        def fn(tx: Tx) -> tuple[Row[Any], Run] | None:
            _seen(tx, namespace, queue, worker_id, now, slots=slots)
            idle: dict[int, int] = {}
            for cand in _candidates(tx, claimable):
                need = cand.capacity_idle
                if need is not None:
                    hb = int(cand.heartbeat_timeout)
                    if hb not in idle:
                        idle[hb] = idle_workers(tx.conn, namespace, queue,
                                                now - idle_window(hb))
                    if idle[hb] < need:
                        continue
                # Lock this one row only; one another claimer holds is skipped.
                row = tx.conn.execute(for_update_skip_locked(
                    select(wi).where(wi.c.run_id == cand.run_id, *claimable),
                    self._db.dialect)).first()
                got = None if row is None else self._hand_out(tx, row, worker_id, token, now)
                if got is not None:
                    return got
            return None

        got = self._db.write(fn)
        if got is None:
            return None
        item, run = got
        return Claim(item_from_row(item), run, token)

    def _hand_out(self, tx: Tx, row: Row[Any], worker_id: str, token: str,
                  now: datetime) -> tuple[Row[Any], Run] | None:
        lease = now + timedelta(seconds=int(row.heartbeat_timeout))
        item = tx.conn.execute(
            update(wi).where(wi.c.run_id == row.run_id, wi.c.state == WorkState.QUEUED.value)
            .values(state=WorkState.HELD.value, lease_token_hash=token_hash(token),
                    worker_id=worker_id, claimed_at=now, lease_expires_at=lease,
                    last_heartbeat=now, progress=None, percent=None,
                    deadline_at=now + timedelta(seconds=int(row.timeout)))
            .returning(*wi.c)).one()
        run = tx.conn.execute(
            update(sj).where(sj.c.id == row.run_id, sj.c.scheduled_for == row.scheduled_for,
                             sj.c.node_id.is_(None))
            .values(status=RunStatus.RUNNING.value, attempt=row.attempt,
                    started_at=func.coalesce(sj.c.started_at, now), lease_expires_at=lease,
                    next_attempt_at=None)
            .returning(*sj.c)).first()
        if run is None:  # its run row is gone (the partition dropped): the item goes too
            tx.conn.execute(delete(wi).where(wi.c.run_id == row.run_id))
            return None
        tx.conn.execute(update(ww).where(ww.c.namespace == row.namespace,
                                         ww.c.queue == row.queue, ww.c.worker_id == worker_id)
                        .values(held=ww.c.held + 1))
        return item, run_from_row(run)

    def heartbeat(self, run_id: str, token: str, *, progress: str | None,
                  percent: float | None, now: datetime) -> HeartbeatAck:
        """See ``WorkQueueStore.heartbeat``."""

        def fn(tx: Tx) -> HeartbeatAck:
            row = self._held(tx, run_id, token)
            lease = now + timedelta(seconds=int(row.heartbeat_timeout))
            values: dict[str, Any] = {"lease_expires_at": lease, "last_heartbeat": now}
            if progress is not None:
                values["progress"] = storable(progress)
            if percent is not None:
                values["percent"] = percent
            tx.conn.execute(update(wi).where(wi.c.run_id == run_id).values(**values))
            _seen(tx, row.namespace, row.queue, row.worker_id, now)
            return HeartbeatAck(bool(row.cancel_requested), lease)

        return self._db.write(fn)

    def complete(self, run_id: str, token: str, *, status: str,
                 result: dict[str, Any] | None, error: str | None, now: datetime) -> Run:
        """See ``WorkQueueStore.complete``."""
        hook = self._on_succeeded

        def fn(tx: Tx) -> Run | None:
            row = self._held(tx, run_id, token)
            if status == RunStatus.SUCCEEDED:
                return finish(tx, row, RunStatus.SUCCEEDED, now, result=result, hook=hook)
            if row.cancel_requested:
                return finish(tx, row, RunStatus.FAILED, now, result=result,
                              error=_cancelled(row.cancel_reason, error))
            _, run = fail_attempt(tx, row, now, error or "the worker reported a failure",
                                  result=result)
            return run

        run = self._db.write(fn)
        if run is None:
            raise NotFound(f"no run {run_id!r}")
        return run

    def _held(self, tx: Tx, run_id: str, token: str) -> Row[Any]:
        """The run's held item under this token, locked; else StaleLease / NotFound."""
        row = tx.conn.execute(
            select(wi).where(wi.c.run_id == run_id, wi.c.state == WorkState.HELD.value,
                             wi.c.lease_token_hash == token_hash(token))
            .with_for_update()).first()
        if row is not None:
            return row
        if _run_exists(tx, run_id):
            raise StaleLease("the lease token is not this run's current lease (it expired, "
                             "or the run was re-queued or completed)", field="lease_token")
        raise NotFound(f"no run {run_id!r}")

    # -- operators -----------------------------------------------------------

    def cancel(self, run_id: str, reason: str | None, *, now: datetime) -> WorkItem | None:
        """See ``WorkQueueStore.cancel``."""

        def fn(tx: Tx) -> WorkItem | None:
            row = tx.conn.execute(select(wi).where(wi.c.run_id == run_id,
                                                   wi.c.state.in_(LIVE_STATES))
                                  .with_for_update()).first()
            if row is None:
                return None
            if row.state == WorkState.QUEUED:
                finish(tx, row, RunStatus.FAILED, now, error=_cancelled(reason, None))
                return item_from_row(row)
            tx.conn.execute(update(wi).where(wi.c.run_id == run_id)
                            .values(cancel_requested=True, cancel_reason=reason))
            return item_from_row(row)

        return self._db.write(fn)

    def expire(self, now: datetime, limit: int = 100) -> ExpiryReport:
        """See ``WorkQueueStore.expire``."""
        deleted = time.monotonic() >= self._next_deleted_check
        if deleted:
            self._next_deleted_check = time.monotonic() + DELETED_CHECK_INTERVAL
        report = self._db.write(lambda tx: expire_items(tx, now, limit, deleted_jobs=deleted))
        if time.monotonic() >= self._next_forget:  # workers long gone leave the lists
            self._next_forget = time.monotonic() + FORGET_INTERVAL
            self._db.write(lambda tx: tx.conn.execute(
                ww.delete().where(ww.c.last_seen < now - WORKER_FORGET)).rowcount)
        return report

    def take_ended(self, limit: int = 100) -> list[Run]:
        """See ``WorkQueueStore.take_ended``."""

        def fn(tx: Tx) -> list[Run]:
            pick = for_update_skip_locked(
                select(wi.c.run_id, wi.c.scheduled_for).where(wi.c.state == ENDED)
                .order_by(wi.c.run_id).limit(limit), tx.dialect)
            keys = [(r[0], r[1]) for r in tx.conn.execute(pick).all()]
            if not keys:
                return []
            ids = [k[0] for k in keys]
            tx.conn.execute(delete(wi).where(wi.c.run_id.in_(ids)))
            rows = tx.conn.execute(select(sj).where(
                sj.c.id.in_(ids), sj.c.scheduled_for.in_(sorted({k[1] for k in keys})))).all()
            return [run_from_row(r) for r in rows]

        return self._db.write(fn)

    # -- reads -------------------------------------------------------------

    def namespace_of(self, run_id: str) -> str | None:
        """See ``WorkQueueStore.namespace_of``."""
        with self._db.read() as conn:
            found = conn.execute(select(wi.c.namespace).where(
                wi.c.run_id == run_id, wi.c.state.in_(LIVE_STATES))).first()
        return None if found is None else str(found[0])

    def items(self, run_ids: Sequence[str], *, now: datetime) -> dict[str, WorkItem]:
        """See ``WorkQueueStore.items``."""
        ids = sorted(set(run_ids))
        if not ids:
            return {}
        with self._db.read() as conn:
            rows = conn.execute(select(wi).where(wi.c.run_id.in_(ids),
                                                 wi.c.state.in_(LIVE_STATES))).all()
            out: dict[str, WorkItem] = {}
            for row in rows:
                state = None
                if row.state == WorkState.QUEUED and row.capacity_idle is not None:
                    idle = idle_workers(conn, row.namespace, row.queue,
                                        now - idle_window(int(row.heartbeat_timeout)))
                    if idle < row.capacity_idle:
                        state = WorkState.WAITING_CAPACITY.value
                out[row.run_id] = item_from_row(row, state)
        return out

    def queues(self, namespaces: Sequence[str] | None, *, now: datetime,
               limit: int = 1000, after: tuple[str, str] | None = None) -> list[QueueStats]:
        """See ``WorkQueueStore.queues``."""
        where_items: list[Any] = [wi.c.state.in_(LIVE_STATES), wi.c.kind == WorkKind.WORKER.value]
        where_workers: list[Any] = [ww.c.last_seen >= now - WORKER_LISTED]
        if namespaces is not None:
            where_items.append(wi.c.namespace.in_(list(namespaces)))
            where_workers.append(ww.c.namespace.in_(list(namespaces)))
        if after is not None:
            where_items.append(or_(wi.c.namespace > after[0],
                                   and_(wi.c.namespace == after[0], wi.c.queue > after[1])))
            where_workers.append(or_(ww.c.namespace > after[0],
                                     and_(ww.c.namespace == after[0], ww.c.queue > after[1])))
        queued = wi.c.state == WorkState.QUEUED.value
        ready = and_(queued, wi.c.available_at <= now)
        stmt = (select(wi.c.namespace, wi.c.queue,
                       func.sum(_when(queued)), func.sum(_when(wi.c.state == WorkState.HELD.value)),
                       func.min(_time_when(ready, wi.c.available_at)))
                .where(*where_items).group_by(wi.c.namespace, wi.c.queue)
                .order_by(wi.c.namespace, wi.c.queue).limit(limit))
        with self._db.read() as conn:
            figures = {(r[0], r[1]): r for r in conn.execute(stmt)}
            workers: dict[tuple[str, str], list[WorkerSeen]] = {}
            for w in conn.execute(select(ww).where(*where_workers)
                                  .order_by(ww.c.namespace, ww.c.queue, ww.c.worker_id)):
                workers.setdefault((w.namespace, w.queue), []).append(
                    WorkerSeen(w.worker_id, w.last_seen, int(w.held), int(w.slots)))
        out = []
        for key in sorted(set(figures) | set(workers))[:limit]:
            r = figures.get(key)
            oldest = None if r is None or r[4] is None else max(
                0.0, (now - _aware(r[4])).total_seconds())
            out.append(QueueStats(key[0], key[1], int(r[2] or 0) if r else 0,
                                  int(r[3] or 0) if r else 0, oldest, workers.get(key, [])))
        return out

    def wait_for_work(self, namespace: str, queue: str, timeout: float,
                      seen: int | None = None) -> int:
        """See ``WorkQueueStore.wait_for_work``."""
        return self.signals.wait(namespace, queue, timeout, seen)

    def close(self) -> None:
        self.signals.close()


def _held_by(order: WorkOrder) -> tuple[Any, ...]:
    """The order's run row while the node that hands it over holds it."""
    return (sj.c.id == order.run_id, sj.c.scheduled_for == order.scheduled_for,
            sj.c.node_id == order.node_id, sj.c.status.in_(IN_FLIGHT_STATUSES))


def _when(cond: Any) -> Any:
    return cast(case((cond, 1), else_=0), Integer)


def _time_when(cond: Any, column: Any) -> Any:
    return case((cond, column), else_=None)


def _aware(value: Any) -> datetime:
    """A time read through an aggregate (SQLite hands back text, or a naive time)."""
    t: datetime = datetime.fromisoformat(value) if isinstance(value, str) else value
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def _candidates(tx: Tx, claimable: tuple[Any, ...]) -> list[Row[Any, Any, Any]]:
    """The queue's next ``CLAIM_PICK`` claimable rows: highest priority, then due
    first (ties in the index's order). Read a priority level at a time, each in the pick index's own order
    (namespace, queue, state, priority, available_at): "priority descending,
    due time ascending" is no order that index yields, and asked for at once
    it sorts every queued row of the queue on each claim (30 ms a claim at
    7,000 queued, growing with the backlog it then feeds)."""
    out: list[Row[Any, Any, Any]] = []
    below: int | None = None
    while len(out) < CLAIM_PICK:
        level = claimable if below is None else (*claimable, wi.c.priority < below)
        # Both orders are the index's own (backward, then forward): no sort to choose,
        # even where the planner's statistics still think the queue is empty.
        top = tx.conn.execute(select(wi.c.priority).where(*level).order_by(
            wi.c.priority.desc(), wi.c.available_at.desc()).limit(1)).scalar()
        if top is None:
            break
        out.extend(tx.conn.execute(
            select(wi.c.run_id, wi.c.capacity_idle, wi.c.heartbeat_timeout)
            .where(*claimable, wi.c.priority == top)
            .order_by(wi.c.priority, wi.c.available_at)
            .limit(CLAIM_PICK - len(out))).all())
        below = int(top)
    return out


def _seen(tx: Tx, namespace: str, queue: str, worker_id: str, now: datetime, *,
          slots: int | None = None) -> None:
    """Record the worker as seen now (and its slots, on a claim)."""
    if slots is None:
        tx.conn.execute(update(ww).where(ww.c.namespace == namespace, ww.c.queue == queue,
                                         ww.c.worker_id == worker_id).values(last_seen=now))
        return
    tx.conn.execute(
        upsert(ww, ("namespace", "queue", "worker_id"), tx.dialect,
               changes=("last_seen", "slots")),
        {"namespace": namespace, "queue": queue, "worker_id": worker_id, "held": 0,
         "slots": slots, "last_seen": now})


def _run_exists(tx: Tx, run_id: str) -> bool:
    return tx.conn.execute(select(sj.c.id).where(sj.c.id == run_id).limit(1)).first() is not None


def _cancelled(reason: str | None, error: str | None) -> str:
    text = "cancelled" + (f": {reason}" if reason else "")
    return text if not error else f"{text} ({error})"
