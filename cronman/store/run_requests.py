"""Runs the API asks for: trigger, replay, backfill.

They are stored with status ``claimed`` and no node, announced as
``RUNS_REQUESTED``; ``take_requested_runs`` (``run_leases``) then hands them
to a node.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from datetime import date, datetime

from sqlalchemy import select, update

from cronman.errors import Conflict, NotFound, StoreUnavailable
from cronman.ids import run_id_for
from cronman.models import Job, Run
from cronman.store import history
from cronman.store.base import RUNS_REQUESTED
from cronman.store.codec import run_from_row
from cronman.store.engine import Database, Tx
from cronman.store.records import ChangeContext
from cronman.store.run_bulk import insert_runs
from cronman.store.run_reads import run_key_range
from cronman.store.tables import FINAL_STATUSES
from cronman.store.tables import scheduled_jobs as sj
from cronman.timeutil import format_rfc3339, from_ms, to_ms, utcnow

log = logging.getLogger(__name__)


class RunRequests:
    """Requested runs (mixed into ``SqlRunStore``, which sets ``_db`` and
    ``_prepare_days``)."""

    _db: Database
    _prepare_days: Callable[[Iterable[date]], object] | None

    def request_trigger(self, job: Job, at: datetime,
                        change: ChangeContext | None = None) -> Run:
        """A manual fire at ``at`` (truncated to the millisecond, the precision
        of run ids). ``Conflict`` if the job already has a run at that time."""
        at = from_ms(to_ms(at))
        run = Run(id=run_id_for(job.id, at), job_id=job.id, scheduled_for=at, status="claimed",
                  attempt=0, node_id=None, origin="trigger", claimed_at=utcnow())

        def fn(tx: Tx) -> None:
            if not insert_runs(tx, [run]):
                raise Conflict(f"job {job.id} already has a run scheduled for this time",
                               field="at")
            history.requested(tx, change, job.id, {"run_id": run.id,
                                                   "scheduled_for": format_rfc3339(at)})
            tx.announce([RUNS_REQUESTED])

        self._db.write(fn)
        return run

    def request_replay(self, run_id: str, change: ChangeContext | None = None) -> Run:
        """Put a finished run back in flight: status ``claimed`` with no node,
        ``attempt`` + 1, origin ``replay``. The previous outcome (result, error,
        started/finished times, durations) is cleared so the row describes the
        attempt under way, and a cancel asked of an earlier attempt with it;
        ``skipped_before`` is kept."""
        span = run_key_range(run_id)
        if span is None:
            raise NotFound(f"no run {run_id}")
        key = [sj.c.id == run_id, sj.c.scheduled_for >= span[0], sj.c.scheduled_for < span[1]]
        stmt = (update(sj)
                .where(*key, sj.c.status.in_(FINAL_STATUSES))
                .values(status="claimed", node_id=None, attempt=sj.c.attempt + 1,
                        origin="replay", claimed_at=utcnow(), started_at=None,
                        finished_at=None, lateness_ms=None, duration_ms=None, result=None,
                        error=None, lease_expires_at=None, next_attempt_at=None,
                        cancel_request=None)
                .returning(*sj.c))

        def fn(tx: Tx) -> Run:
            row = tx.conn.execute(stmt).first()
            if row is None:
                status = tx.conn.execute(select(sj.c.status).where(*key)).scalar()
                if status is None:
                    raise NotFound(f"no run {run_id}")
                raise Conflict(f"run {run_id} is still {status}")
            run = run_from_row(row)
            history.requested(tx, change, run.job_id, {
                "run_id": run.id, "scheduled_for": format_rfc3339(run.scheduled_for),
                "attempt": run.attempt})
            tx.announce([RUNS_REQUESTED])
            return run

        return self._db.write(fn)

    def request_backfill(self, job: Job, fire_times: Sequence[datetime],
                         change: ChangeContext | None = None) -> list[str]:
        """Runs of ``job`` at ``fire_times`` (truncated to the millisecond)
        that it does not have yet; returns the ids of those stored."""
        times = sorted({from_ms(to_ms(t)) for t in fire_times})
        if not times:
            return []
        if self._prepare_days is not None:
            try:
                self._prepare_days({t.date() for t in times})
            except StoreUnavailable as exc:  # the rows then go to the default partition
                log.warning("backfill: could not create partitions: %s", exc)
        now = utcnow()
        rows = [Run(id=run_id_for(job.id, t), job_id=job.id, scheduled_for=t,
                    status="claimed", attempt=0, node_id=None, origin="backfill",
                    claimed_at=now) for t in times]

        def fn(tx: Tx) -> list[str]:
            inserted = insert_runs(tx, rows)
            history.requested(tx, change, job.id, {"requested": len(inserted),
                                                   "fire_times": len(times)})
            if inserted:
                tx.announce([RUNS_REQUESTED])
            return [r.id for r in rows if r.id in inserted]

        return self._db.write(fn)
