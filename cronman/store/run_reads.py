"""Reads by run id and by job: ``get_run``, ``earlier_attempts``, ``list_runs``, ``last_runs``,
``in_flight_runs``, ``count_buffered`` of the SQL run store (the operator's searches across jobs
are ``run_search``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.sql.elements import ColumnElement

from cronman.ids import scheduled_for_of_run_id
from cronman.models import Page, Run, RunFilter
from cronman.store import run_bulk
from cronman.store.codec import decode_run_cursor, encode_run_cursor, run_from_row
from cronman.store.dialect import recent_runs_start
from cronman.store.engine import Database
from cronman.store.records import AttemptOutcome
from cronman.store.tables import IN_FLIGHT_STATUSES
from cronman.store.tables import scheduled_jobs as sj
from cronman.timeutil import parse_rfc3339, utcnow
from cronman.vocabulary import BUFFERED_PREFIX, RunStatus

_ONE_MS = timedelta(milliseconds=1)


def run_key_range(run_id: str) -> tuple[datetime, datetime] | None:
    """The [from, to) range of scheduled_for a run id allows (ids carry
    milliseconds); None for an id that is no run id."""
    t = scheduled_for_of_run_id(run_id)
    return None if t is None else (t, t + _ONE_MS)


def _windows(dialect: str, lo: datetime | None, hi: datetime | None
             ) -> list[list[ColumnElement[bool]]]:
    """Newest-first, disjoint scheduled_for windows covering [lo, hi): the
    recent partitions, then the rest (see ``recent_runs_start``)."""
    split = recent_runs_start(dialect, utcnow())
    if split is None:
        return [[]]
    windows: list[list[ColumnElement[bool]]] = []
    if hi is None or hi > split:
        windows.append([sj.c.scheduled_for >= split])
    if lo is None or lo < split:
        windows.append([sj.c.scheduled_for < split])
    return windows


class RunReads:
    """Reads by run id and by job (mixed into ``SqlRunStore``, which sets ``_db``)."""

    _db: Database

    def get_run(self, run_id: str) -> Run | None:
        """See ``RunStore.get_run``."""
        span = run_key_range(run_id)
        if span is None:
            return None
        stmt = select(sj).where(sj.c.id == run_id, sj.c.scheduled_for >= span[0],
                                sj.c.scheduled_for < span[1])
        with self._db.read() as conn:
            row = conn.execute(stmt).first()
        return None if row is None else run_from_row(row)

    def earlier_attempts(self, run_id: str) -> list[AttemptOutcome]:
        """See ``RunStore.earlier_attempts``."""
        span = run_key_range(run_id)
        if span is None:
            return []
        stmt = select(sj.c.attempts).where(sj.c.id == run_id, sj.c.scheduled_for >= span[0],
                                           sj.c.scheduled_for < span[1])
        with self._db.read() as conn:
            kept = conn.execute(stmt).scalar()
        return [_attempt_of(e) for e in kept or () if isinstance(e, dict)]

    def get_runs(self, run_ids: Sequence[str]) -> dict[str, Run]:
        """See ``RunStore.get_runs``."""
        spans = {run_id: span for run_id in dict.fromkeys(run_ids)
                 if (span := run_key_range(run_id)) is not None}
        found: dict[str, Run] = {}
        with self._db.read() as conn:
            for chunk in run_bulk.chunks(sorted(spans)):
                lo = min(spans[r][0] for r in chunk)
                hi = max(spans[r][1] for r in chunk)
                stmt = select(sj).where(sj.c.id.in_(list(chunk)), sj.c.scheduled_for >= lo,
                                        sj.c.scheduled_for < hi)
                for row in conn.execute(stmt):
                    run = run_from_row(row)
                    found[run.id] = run
        return found

    def list_runs(self, job_id: str, flt: RunFilter, limit: int, cursor: str | None) -> Page:
        """Newest first; ``since`` is inclusive, ``until`` exclusive.

        (job_id, scheduled_for) is unique, so the cursor's scheduled_for alone
        marks the position; the unique index serves the order.
        """
        conds: list[ColumnElement[bool]] = [sj.c.job_id == job_id]
        hi = flt.until
        if flt.since is not None:
            conds.append(sj.c.scheduled_for >= flt.since)
        if flt.until is not None:
            conds.append(sj.c.scheduled_for < flt.until)
        if flt.statuses:
            conds.append(sj.c.status.in_(list(flt.statuses)))
        if cursor:
            after = decode_run_cursor(cursor)
            conds.append(sj.c.scheduled_for < after)
            hi = after if hi is None else min(hi, after)
        rows: list[Any] = []
        with self._db.read() as conn:
            for window in _windows(self._db.dialect, flt.since, hi):
                need = limit + 1 - len(rows)
                if need <= 0:
                    break
                stmt = (select(sj).where(*conds, *window)
                        .order_by(sj.c.scheduled_for.desc()).limit(need))
                rows.extend(conn.execute(stmt).all())
        items = [run_from_row(r) for r in rows[:limit]]
        next_cursor = None
        if len(rows) > limit and items:
            next_cursor = encode_run_cursor(items[-1].scheduled_for)
        return Page(items, next_cursor)

    def last_runs(self, job_ids: Sequence[str]) -> dict[str, Run]:
        """See ``RunStore.last_runs``."""
        ids = list(dict.fromkeys(job_ids))
        if not ids:
            return {}
        with self._db.read() as conn:
            return run_bulk.last_runs(conn, ids)

    def count_buffered(self, job_id: str) -> int:
        """See ``RunStore.count_buffered``."""
        stmt = (select(func.count()).select_from(sj)
                .where(sj.c.job_id == job_id, sj.c.status == RunStatus.CLAIMED.value,
                       sj.c.error.startswith(BUFFERED_PREFIX, autoescape=True)))
        with self._db.read() as conn:
            return int(conn.execute(stmt).scalar_one())

    def in_flight_runs(self, job_ids: Sequence[str]) -> dict[str, list[Run]]:
        """See ``RunStore.in_flight_runs``."""
        ids = list(dict.fromkeys(job_ids))
        found: dict[str, list[Run]] = {}
        with self._db.read() as conn:
            for chunk in run_bulk.chunks(ids):
                stmt = (select(sj).where(sj.c.status.in_(IN_FLIGHT_STATUSES),
                                         sj.c.job_id.in_(list(chunk)))
                        .order_by(sj.c.scheduled_for))
                for row in conn.execute(stmt):
                    run = run_from_row(row)
                    found.setdefault(run.job_id, []).append(run)
        return found


def _attempt_of(e: dict[str, Any]) -> AttemptOutcome:
    """An entry of ``scheduled_jobs.attempts`` as the trigger wrote it."""
    def when(name: str) -> datetime | None:
        value = e.get(name)
        return parse_rfc3339(value) if isinstance(value, str) else None
    result = e.get("result")
    return AttemptOutcome(
        attempt=int(e.get("attempt") or 0), status=str(e.get("status") or ""),
        node_id=e.get("node_id"), started_at=when("started_at"),
        finished_at=when("finished_at"), duration_ms=e.get("duration_ms"),
        result=result if isinstance(result, dict) else None, error=e.get("error"))
