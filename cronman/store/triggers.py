"""Triggers: the runs of ``after`` jobs, made in the transaction that records
an upstream's success.

``write_run_updates`` calls :func:`after_success` with the runs its batch
made ``succeeded`` whose job is the upstream of another (``job_edges``), in
its own transaction -- so a success and what it triggers commit together or
not at all. For each such run and each live ``after`` job listening to its
job:

1. the success is recorded once per downstream job in ``trigger_events``,
   keyed on (downstream, upstream run id, attempt): a replayed write of the
   same success (a retried batch, a second node recording it from an outcome
   mark) finds the key taken and makes nothing;
2. ``any``: a run of the downstream job is made at once, consuming the
   event; ``all``: when every upstream the schedule names has an event not
   yet consumed, one run is made consuming all of them (several successes
   of one upstream while the others had none are folded into that run and
   all recorded as consumed);
3. the run is stored as an API-requested run is (``claimed``, no node,
   origin ``upstream``, its ``gate`` naming the upstream runs it consumed)
   and ``RUNS_REQUESTED`` is announced: a node takes it at once
   (``take_requested_runs``), and the lease sweeper carries it on if that
   node dies.

The downstream's job row is locked (``FOR UPDATE``) before its events are
read, so two nodes writing the successes of two upstreams of one ``all`` job
at the same moment cannot both see an incomplete set. A paused downstream,
or one outside its ``start_at``/``end_at`` window, hears nothing. Successes
of jobs with ``depends_on`` dependents are announced on the change feed
(``*ok:<job id>``) to wake the fires waiting for them
(cronman.scheduler.dispatch.gates).

A run's ``scheduled_for`` is the trigger's time (the database's clock on
PostgreSQL), a millisecond later when that one is taken: (job, scheduled_for)
stays unique and the run id deterministic in it. The event key, not a run id
derived from the upstream run, is the fence: run ids carry their
``scheduled_for`` (the partition key), and a time derived from the upstream
(its scheduled time) would collide for two upstreams due at the same moment,
while an ``all`` set needs its pending events stored anyway.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import and_, delete, select, update

from cronman.ids import run_id_for
from cronman.models import Run
from cronman.store.base import RUNS_REQUESTED, UPSTREAM_SUCCEEDED
from cronman.store.codec import run_values
from cronman.store.dialect import for_update, insert_ignoring_conflicts
from cronman.store.engine import Tx
from cronman.store.tables import job_edges, jobs, scheduled_jobs, trigger_events
from cronman.timeutil import format_rfc3339, from_ms, now_ms, to_ms
from cronman.vocabulary import EdgeKind, RunOrigin, RunStatus, TriggerMode

te = trigger_events
sj = scheduled_jobs
# A trigger's time taken by other runs of the job this many times in a row: give up.
MAX_TIME_PROBES = 1000


class SucceededRun(NamedTuple):
    """A run a write made ``succeeded`` (as its row now reads)."""

    run_id: str
    job_id: str
    scheduled_for: datetime
    attempt: int


SuccessHook = Callable[[Tx, list[SucceededRun]], None]


def event_key(run: SucceededRun) -> str:
    return f"{run.run_id}:{run.attempt}"


def upstream_entry(run_id: str, job_id: str, scheduled_for: datetime,
                   attempt: int) -> dict[str, Any]:
    """How a run's ``gate`` names one upstream run it consumed or found fresh."""
    return {"job_id": job_id, "run_id": run_id,
            "scheduled_for": format_rfc3339(scheduled_for), "attempt": attempt}


def after_success(tx: Tx, runs: list[SucceededRun]) -> None:
    """Announce the successes of upstream jobs and make the runs they trigger."""
    upstream_ids = sorted({r.job_id for r in runs})
    edges = tx.conn.execute(
        select(job_edges.c.downstream_id, job_edges.c.upstream_id, job_edges.c.kind)
        .where(job_edges.c.upstream_id.in_(upstream_ids))).all()
    waited_on = sorted({up for _, up, kind in edges if kind == EdgeKind.DEPENDS_ON})
    if waited_on:
        tx.announce([UPSTREAM_SUCCEEDED + job_id for job_id in waited_on])
    listeners: dict[str, list[str]] = {}
    for down, up, kind in edges:
        if kind == EdgeKind.AFTER:
            listeners.setdefault(up, []).append(down)
    if not listeners:
        return
    downstream = _lock_downstream(tx, sorted({d for ds in listeners.values() for d in ds}))
    made = 0
    clock = _TriggerClock(tx)
    for run in sorted(runs, key=lambda r: (r.scheduled_for, r.run_id)):
        for down_id in sorted(listeners.get(run.job_id, ())):
            job = downstream.get(down_id)
            if job is None or job["paused"] or not _in_window(job, clock.now_ms()):
                continue
            schedule = job["schedule"] or {}
            wanted = schedule.get("jobs") or []
            if schedule.get("kind") != "after" or run.job_id not in wanted:
                continue
            if not _record_event(tx, down_id, run):
                continue  # this success was heard already
            consumed = _complete_set(tx, down_id, wanted, schedule.get("mode"))
            if consumed:
                _make_run(tx, down_id, consumed, clock)
                made += 1
    if made:
        tx.announce([RUNS_REQUESTED])


def _lock_downstream(tx: Tx, ids: list[str]) -> dict[str, dict[str, Any]]:
    """The live downstream jobs, their rows locked until the commit."""
    stmt = (select(jobs.c.id, jobs.c.schedule, jobs.c.paused, jobs.c.start_at, jobs.c.end_at)
            .where(jobs.c.id.in_(ids), jobs.c.deleted_at.is_(None)).order_by(jobs.c.id))
    stmt = for_update(stmt, tx.dialect)
    return {row.id: {"schedule": row.schedule, "paused": row.paused,
                     "start_at": row.start_at, "end_at": row.end_at}
            for row in tx.conn.execute(stmt)}


def _in_window(job: dict[str, Any], at_ms: int) -> bool:
    """Whether a trigger at ``at_ms`` falls in the job's [start_at, end_at]."""
    start, end = job["start_at"], job["end_at"]
    return ((start is None or to_ms(start) <= at_ms)
            and (end is None or at_ms <= to_ms(end)))


def _insert(tx: Tx, table: Any, values: dict[str, Any]) -> bool:
    """INSERT ... ON CONFLICT DO NOTHING; whether the row went in."""
    stmt = insert_ignoring_conflicts(table, tx.dialect).values(**values)
    return bool(tx.conn.execute(stmt).rowcount)


def _record_event(tx: Tx, downstream_id: str, run: SucceededRun) -> bool:
    return _insert(tx, te, {
        "downstream_id": downstream_id, "event_key": event_key(run),
        "upstream_id": run.job_id, "upstream_run_id": run.run_id,
        "upstream_scheduled_for": run.scheduled_for, "upstream_attempt": run.attempt,
        "consumed_by": None, "created_at": from_ms(now_ms())})


def _complete_set(tx: Tx, downstream_id: str, wanted: Sequence[str],
                  mode: Any) -> list[Any]:
    """The events a new run consumes now, or [] while the set is incomplete."""
    pending = tx.conn.execute(
        select(te.c.event_key, te.c.upstream_id, te.c.upstream_run_id,
               te.c.upstream_scheduled_for, te.c.upstream_attempt)
        .where(te.c.downstream_id == downstream_id, te.c.consumed_by.is_(None))
        .order_by(te.c.upstream_scheduled_for, te.c.event_key)).all()
    if not pending:
        return []
    if mode == TriggerMode.ANY:
        return list(pending)
    heard = {row.upstream_id for row in pending}
    return list(pending) if all(job_id in heard for job_id in wanted) else []


class _TriggerClock:
    """The trigger's time in ms: the database's clock on PostgreSQL (one
    reading per transaction), this process's on SQLite."""

    def __init__(self, tx: Tx) -> None:
        self._tx = tx
        self._ms: int | None = None
        self.last: dict[str, int] = {}  # per downstream: the latest time used here

    def now_ms(self) -> int:
        if self._ms is None:
            self._ms = self._tx.now_ms()
        return self._ms


def _make_run(tx: Tx, downstream_id: str, consumed: list[Any], clock: _TriggerClock) -> str:
    at = max(clock.now_ms(), clock.last.get(downstream_id, 0) + 1)
    gate = {"upstream": [upstream_entry(e.upstream_run_id, e.upstream_id,
                                        e.upstream_scheduled_for, e.upstream_attempt)
                         for e in consumed]}
    claimed_at = from_ms(clock.now_ms())
    for _ in range(MAX_TIME_PROBES):
        t = from_ms(at)
        run = Run(id=run_id_for(downstream_id, t), job_id=downstream_id, scheduled_for=t,
                  status=RunStatus.CLAIMED.value, attempt=0, node_id=None,
                  origin=RunOrigin.UPSTREAM.value, claimed_at=claimed_at, gate=gate)
        if _insert(tx, sj, run_values(run)):
            break
        at += 1  # another run of the job holds this millisecond
    else:
        raise RuntimeError(f"no free time for a triggered run of job {downstream_id}")
    clock.last[downstream_id] = at
    tx.conn.execute(update(te).where(
        te.c.downstream_id == downstream_id,
        te.c.event_key.in_([e.event_key for e in consumed])).values(consumed_by=run.id))
    return run.id


def forget_downstream(tx: Tx, downstream_id: str, keep_upstreams: Sequence[str] = ()) -> None:
    """Drop the pending events of a job (deleted, or no longer listening to
    the upstreams not in ``keep_upstreams``)."""
    cond = and_(te.c.downstream_id == downstream_id, te.c.consumed_by.is_(None))
    if keep_upstreams:
        cond = and_(cond, te.c.upstream_id.not_in(list(keep_upstreams)))
    tx.conn.execute(delete(te).where(cond))


def purge_events(tx: Tx, older_than: datetime) -> int:
    """Forget trigger events recorded before ``older_than`` (the history's
    retention: a success is never written again that late)."""
    return int(tx.conn.execute(delete(te).where(te.c.created_at < older_than)).rowcount)
