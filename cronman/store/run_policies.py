"""The circuit breaker and the run limit: the ends of runs counted per job, in
the transaction that writes them.

A run whose job counts its runs' ends (``Job.counts_runs``: it has
``pause_after_failures`` or ``max_runs``) carries its job in its final
``RunUpdate`` (``counted_job``). ``write_run_updates`` writes such an update
on its own, only over a row still in flight (``claimed``, ``running``,
``retrying``): the rows it changes are exactly the runs that ended now, so a
replayed write (a retried batch, a sweeper recording an outcome mark the
node's writer also flushes) counts nothing twice. :func:`count_ends` then,
per job, with its row locked:

- ``runs_done`` grows by the runs that ended (any final status but
  ``skipped``); ``failure_streak`` grows by each ``failed`` or ``lost`` one
  and is reset by a ``succeeded`` one, in the runs' order of scheduled time;
- at ``pause_after_failures`` failed runs in a row a live, unpaused job
  pauses itself: ``paused``, ``pause_reason`` (the count and the last
  error), recorded in its history (action ``pause``, actor ``scheduler``);
- at ``max_runs`` runs it is done: ``done_at`` set and ``paused`` (no more
  fires; ``resume`` refuses until ``max_runs`` is raised), recorded too
  (action ``done``).

Both changes bump the job's version and ``change_seq`` and are announced on
the change feed, as any job change: every node stops firing it. The counters
alone move neither (they are no change of the definition). Being in the
database, the counts hold across nodes and restarts.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import NamedTuple

from sqlalchemy import select, update

from cronman.store import history
from cronman.store.change_seq import next_change_seqs
from cronman.store.dialect import for_update
from cronman.store.engine import Tx
from cronman.store.tables import jobs
from cronman.timeutil import utcnow
from cronman.vocabulary import COUNTED_STATUSES, SCHEDULER_ACTOR, JobAction, RunStatus

# The last error quoted in a pause reason, at most this many characters.
REASON_ERROR_MAX = 300
_COUNTED = frozenset(s.value for s in COUNTED_STATUSES)
_FAILED = frozenset((RunStatus.FAILED.value, RunStatus.LOST.value))


class RunEnd(NamedTuple):
    """A run of a counting job that reached its final status in this write."""

    job_id: str
    scheduled_for: datetime
    status: str
    error: str | None


def counted(status: str) -> bool:
    """Whether a run ending with ``status`` counts (``skipped`` does not)."""
    return status in _COUNTED


def pause_reason(streak: int, error: str | None) -> str:
    """The ``pause_reason`` of a job its breaker paused."""
    last = (error or "no error recorded").strip()
    if len(last) > REASON_ERROR_MAX:
        last = last[:REASON_ERROR_MAX - 1] + "…"
    return f"paused after {streak} consecutive failed runs; last error: {last}"


def count_ends(tx: Tx, ends: Sequence[RunEnd]) -> None:
    """Count ``ends`` for their jobs; pause or finish the jobs they bring to a limit."""
    by_job: dict[str, list[RunEnd]] = {}
    for e in ends:
        if counted(e.status):
            by_job.setdefault(e.job_id, []).append(e)
    if not by_job:
        return
    stmt = (select(jobs.c.id, jobs.c.namespace, jobs.c.name, jobs.c.version, jobs.c.paused,
                   jobs.c.pause_after_failures, jobs.c.max_runs, jobs.c.failure_streak,
                   jobs.c.runs_done, jobs.c.done_at)
            .where(jobs.c.id.in_(sorted(by_job)), jobs.c.deleted_at.is_(None))
            .order_by(jobs.c.id))
    changed: list[str] = []
    for row in tx.conn.execute(for_update(stmt, tx.dialect)).all():
        streak, done = int(row.failure_streak), int(row.runs_done)
        last_error: str | None = None
        for e in sorted(by_job[row.id], key=lambda e: e.scheduled_for):
            done += 1
            if e.status in _FAILED:
                streak += 1
                last_error = e.error
            else:
                streak = 0
        values: dict[str, object] = {"failure_streak": streak, "runs_done": done}
        entry: tuple[JobAction, dict[str, object]] | None = None
        if row.max_runs is not None and done >= row.max_runs and row.done_at is None:
            values.update(done_at=utcnow(), paused=True)
            if not row.paused:
                values["paused_at"] = utcnow()
            entry = (JobAction.DONE, {"max_runs": row.max_runs, "runs_done": done})
        elif (row.pause_after_failures is not None and streak >= row.pause_after_failures
              and not row.paused and row.done_at is None):
            reason = pause_reason(streak, last_error)
            values.update(paused=True, pause_reason=reason, pause_note=None,
                          paused_at=utcnow())
            entry = (JobAction.PAUSE, {"reason": reason, "failure_streak": streak})
        if entry is not None:
            (seq,) = next_change_seqs(tx, 1)
            values.update(version=jobs.c.version + 1, change_seq=seq, updated_at=utcnow())
            changed.append(row.id)
            history.recorded(tx, job_id=row.id, namespace=row.namespace, name=row.name,
                             version=row.version + 1, action=entry[0], actor=SCHEDULER_ACTOR,
                             details=entry[1])
        tx.conn.execute(update(jobs).where(jobs.c.id == row.id).values(**values))
    if changed:
        tx.announce(changed)
