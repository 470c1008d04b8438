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
import threading
import time
from collections.abc import Collection, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    Float,
    Integer,
    Text,
    and_,
    bindparam,
    case,
    cast,
    delete,
    func,
    insert,
    literal,
    or_,
    select,
    update,
)
from sqlalchemy.engine import Connection, Row

from cronman.errors import CronmanError, NotFound, StaleLease
from cronman.models import Run
from cronman.store.codec import run_from_row, storable
from cronman.store.dialect import for_update_skip_locked, plus_seconds, upsert
from cronman.store.engine import Database, Tx
from cronman.store.tables import IN_FLIGHT_STATUSES, NullableJsonType, UTCDateTime
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
from cronman.store.work_signals import Waiter, WorkSignals
from cronman.timeutil import utcnow
from cronman.vocabulary import RunStatus, WorkKind, WorkState

# Candidates a claim looks at beyond the runs it asks for (the first whose
# capacity holds and that no other claim has locked win; only those are locked).
CLAIM_PICK = 16
# Workers not seen for this long are dropped from the queue's list.
WORKER_FORGET = timedelta(days=1)
FORGET_INTERVAL = 60.0
# How often the expiry looks for queued runs of deleted jobs.
DELETED_CHECK_INTERVAL = 10.0
# Workers listed with a queue: those seen this recently.
WORKER_LISTED = timedelta(minutes=10)
# A heartbeat records its worker as seen at most this often (seconds, per
# process): enough for the idle count, whose window is 30 s at least.
WORKER_TOUCH = 5.0
TOUCHED_KEPT = 10_000


class SqlWorkQueue:
    """Work queues on one database (see the module docstring)."""

    def __init__(self, db: Database, on_succeeded: SuccessHook | None = None,
                 signals: WorkSignals | None = None) -> None:
        self._db = db
        self._on_succeeded = on_succeeded
        self.signals = signals or WorkSignals(db)
        self._next_forget = 0.0
        self._next_deleted_check = 0.0
        self._renew = {r: _renew_statement(db.dialect, r) for r in (False, True)}
        self._touched: dict[tuple[str, str, str], float] = {}
        self._touch_lock = threading.Lock()

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
        got = self.claim_many(namespace, queue, worker_id, slots=slots, now=now, seen=seen)
        return got[0] if got else None

    def claim_many(self, namespace: str, queue: str, worker_id: str, *, slots: int,
                   now: datetime, seen: bool = True, limit: int = 1) -> list[Claim]:
        """See ``WorkQueueStore.claim_many``."""
        claimable = (wi.c.namespace == namespace, wi.c.queue == queue,
                     wi.c.state == WorkState.QUEUED.value, wi.c.available_at <= now)
        if not seen:
            # A long-poll's next look: no write (and on SQLite no write lock) for nothing.
            with self._db.read() as conn:
                if conn.execute(select(wi.c.run_id).where(*claimable).limit(1)).first() is None:
                    return []

        def fn(tx: Tx) -> list[Claim]:
            _seen(tx, namespace, queue, worker_id, now, slots=slots)
            idle: dict[int, int] = {}
            picked = []
            for cand in _candidates(tx, claimable, limit + CLAIM_PICK - 1):
                need = cand.capacity_idle
                if need is not None:
                    hb = int(cand.heartbeat_timeout)
                    if hb not in idle:
                        idle[hb] = idle_workers(tx.conn, namespace, queue,
                                                now - idle_window(hb))
                    if idle[hb] < need:
                        continue
                picked.append(cand.run_id)
            if not picked:
                return []
            # Lock the first ``limit`` of them; rows another claimer holds are skipped.
            rows = tx.conn.execute(for_update_skip_locked(
                select(wi).where(wi.c.run_id.in_(picked), *claimable)
                .order_by(wi.c.priority.desc(), wi.c.available_at).limit(limit),
                self._db.dialect)).all()
            return _hand_out(tx, rows, worker_id, now) if rows else []

        return self._db.write(fn)

    def heartbeat(self, run_id: str, token: str, *, progress: str | None,
                  percent: float | None, now: datetime,
                  output: dict[str, Any] | None = None,
                  namespaces: Collection[str] | None = None) -> HeartbeatAck:
        """See ``WorkQueueStore.heartbeat``."""
        params: dict[str, Any] = {
            "b_run_id": run_id, "b_token_hash": token_hash(token), "b_now": now,
            "b_progress": None if progress is None else storable(progress),
            "b_percent": percent,
            "b_output": None if output is None else storable(output)}
        if namespaces is not None:
            params["b_namespaces"] = sorted(namespaces)
        rows = self._db.write_one(self._renew[namespaces is not None], params)
        if not rows:
            with self._db.read() as conn:
                raise _refusal(conn, run_id)
        row = rows[0]
        self._touch(row.namespace, row.queue, row.worker_id, now)
        return HeartbeatAck(bool(row.cancel_requested), row.lease_expires_at)

    def _touch(self, namespace: str, queue: str, worker_id: str, now: datetime) -> None:
        """Record a heartbeating worker as seen, at most every ``WORKER_TOUCH`` s
        from this process (its row is one for all the runs it holds)."""
        key = (namespace, queue, worker_id)
        t = time.monotonic()
        with self._touch_lock:
            if t - self._touched.get(key, -WORKER_TOUCH) < WORKER_TOUCH:
                return
            self._touched[key] = t
            if len(self._touched) > TOUCHED_KEPT:
                self._touched = {k: v for k, v in self._touched.items()
                                 if t - v < WORKER_TOUCH}
        self._db.write_one(_TOUCH, {"b_namespace": namespace, "b_queue": queue,
                                    "b_worker_id": worker_id, "b_now": now})

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
        raise _refusal(tx.conn, run_id)

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
                state = idle = None
                if row.state == WorkState.QUEUED and row.capacity_idle is not None:
                    idle = idle_workers(conn, row.namespace, row.queue,
                                        now - idle_window(int(row.heartbeat_timeout)))
                    if idle < row.capacity_idle:
                        state = WorkState.WAITING_CAPACITY.value
                out[row.run_id] = item_from_row(row, state, idle)
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

    def waiting(self, namespace: str, queue: str) -> AbstractContextManager[Waiter]:
        """See ``WorkQueueStore.waiting``."""
        return self.signals.waiting(namespace, queue)

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


def _hand_out(tx: Tx, rows: Sequence[Row[Any]], worker_id: str,
              now: datetime) -> list[Claim]:
    """Hold the locked queued ``rows`` for the worker, each under a lease token of
    its own, in three statements however many they are (values per run by CASE)."""
    tokens = {r.run_id: secrets.token_urlsafe(32) for r in rows}
    ids = list(tokens)
    leases = {r.run_id: now + timedelta(seconds=int(r.heartbeat_timeout)) for r in rows}
    items = {r.run_id: r for r in tx.conn.execute(
        update(wi).where(wi.c.run_id.in_(ids), wi.c.state == WorkState.QUEUED.value)
        .values(state=WorkState.HELD.value, worker_id=worker_id, claimed_at=now,
                lease_token_hash=_per_run(wi.c.run_id, {k: token_hash(t)
                                                        for k, t in tokens.items()}, Text()),
                lease_expires_at=_per_run(wi.c.run_id, leases, UTCDateTime()),
                deadline_at=_per_run(wi.c.run_id, {
                    r.run_id: now + timedelta(seconds=int(r.timeout)) for r in rows},
                    UTCDateTime()),
                last_heartbeat=now, progress=None, percent=None, heartbeats=0, output=None)
        .returning(*wi.c))}
    runs = {r.id: r for r in tx.conn.execute(
        update(sj).where(sj.c.id.in_(ids),
                         sj.c.scheduled_for.in_(sorted({r.scheduled_for for r in rows})),
                         sj.c.node_id.is_(None))
        .values(status=RunStatus.RUNNING.value,
                attempt=_per_run(sj.c.id, {r.run_id: int(r.attempt) for r in rows}, Integer()),
                started_at=func.coalesce(sj.c.started_at, now),
                lease_expires_at=_per_run(sj.c.id, leases, UTCDateTime()),
                next_attempt_at=None)
        .returning(*sj.c))}
    gone = [k for k in ids if k not in runs]
    if gone:  # their run rows are gone (the partition dropped): the items go too
        tx.conn.execute(delete(wi).where(wi.c.run_id.in_(gone)))
    out = [Claim(item_from_row(items[k]), run_from_row(runs[k]), tokens[k])
           for k in ids if k in runs and k in items]
    if out:
        first = rows[0]
        tx.conn.execute(update(ww).where(ww.c.namespace == first.namespace,
                                         ww.c.queue == first.queue, ww.c.worker_id == worker_id)
                        .values(held=ww.c.held + len(out)))
    return out


def _per_run(key: Any, values: dict[str, Any], type_: Any) -> Any:
    """``CASE key WHEN run id THEN its value ... END``."""
    return case({k: literal(v, type_) for k, v in values.items()}, value=key)


def _candidates(tx: Tx, claimable: tuple[Any, ...], pick: int) -> list[Row[Any, Any, Any]]:
    """The queue's next ``pick`` claimable rows: highest priority, then due
    first (ties in the index's order). Read a priority level at a time, each in the pick index's own order
    (namespace, queue, state, priority, available_at): "priority descending,
    due time ascending" is no order that index yields, and asked for at once
    it sorts every queued row of the queue on each claim (30 ms a claim at
    7,000 queued, growing with the backlog it then feeds)."""
    out: list[Row[Any, Any, Any]] = []
    below: int | None = None
    while len(out) < pick:
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
            .limit(pick - len(out))).all())
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


def _refusal(conn: Connection, run_id: str) -> CronmanError:
    """Why a worker's call found no held item under its token: ``StaleLease``
    when the run exists, else ``NotFound``."""
    if conn.execute(select(sj.c.id).where(sj.c.id == run_id).limit(1)).first() is not None:
        return StaleLease("the lease token is not this run's current lease (it expired, "
                          "or the run was re-queued or completed)", field="lease_token")
    return NotFound(f"no run {run_id!r}")


def _renew_statement(dialect: str, restricted: bool) -> Any:
    """A heartbeat as one statement: the held item under (run id, token hash),
    in one of ``namespaces`` when ``restricted``, renewed from ``now`` by its
    heartbeat timeout and counted; progress, percent and output kept unless given."""
    now = bindparam("b_now", type_=UTCDateTime())
    where = [wi.c.run_id == bindparam("b_run_id"), wi.c.state == WorkState.HELD.value,
             wi.c.lease_token_hash == bindparam("b_token_hash")]
    if restricted:
        where.append(wi.c.namespace.in_(bindparam("b_namespaces", expanding=True)))
    return (update(wi).where(*where)
            .values(lease_expires_at=plus_seconds(now, wi.c.heartbeat_timeout, dialect),
                    last_heartbeat=now, heartbeats=wi.c.heartbeats + 1,
                    output=func.coalesce(bindparam("b_output", type_=NullableJsonType),
                                         wi.c.output),
                    progress=func.coalesce(bindparam("b_progress", type_=Text()), wi.c.progress),
                    percent=func.coalesce(bindparam("b_percent", type_=Float()), wi.c.percent))
            .returning(wi.c.cancel_requested, wi.c.lease_expires_at, wi.c.namespace,
                       wi.c.queue, wi.c.worker_id))


_TOUCH = (update(ww).where(ww.c.namespace == bindparam("b_namespace"),
                           ww.c.queue == bindparam("b_queue"),
                           ww.c.worker_id == bindparam("b_worker_id"),
                           ww.c.last_seen < bindparam("b_now", type_=UTCDateTime()))
          .values(last_seen=bindparam("b_now", type_=UTCDateTime())))


def _cancelled(reason: str | None, error: str | None) -> str:
    text = "cancelled" + (f": {reason}" if reason else "")
    return text if not error else f"{text} ({error})"
