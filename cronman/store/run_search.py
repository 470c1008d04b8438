"""Runs across jobs (``search_runs``) and per-step run statistics (``run_stats``).

The operator's questions -- "what failed in the last hour?", "how late were
fires today?" -- read the run history by time across every job, where the
scheduler's reads go by job or by run id.

PostgreSQL: every statement bounds ``scheduled_for`` with literal values
(psycopg2 renders parameters client-side), so the planner prunes to the
daily partitions of the window at plan time. A search walks the window
newest first in day-aligned slices of doubling width (today, yesterday, the
two days before, ...): a page found in the last day never plans the other
44 partitions, and a sparse answer costs at most ~log2(days) statements.
Within a slice, one ``(status, scheduled_for, id)`` index range per status,
merged by a UNION ALL of ``ORDER BY ... LIMIT`` branches, gives the newest
rows without reading the rest (PostgreSQL 15 cannot read an index in order
for ``status IN (...)``).

Namespace, target-kind and token scopes are a semi-join on ``jobs`` (runs
carry no namespace): selective on the runs side, they cost a look-up per
run read. SQLite runs the same filters as one plain statement.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, select, text, tuple_, union_all
from sqlalchemy.engine import Connection
from sqlalchemy.sql import Select
from sqlalchemy.sql.elements import ColumnElement

from cronman.models import Page, RunSearch, RunStatsBucket, RunStatsQuery
from cronman.store.codec import decode_search_cursor, encode_search_cursor, run_from_row
from cronman.store.dialect import json_field_text, partitioned_history, sql_percentiles
from cronman.store.engine import Database
from cronman.store.tables import UTCDateTime, jobs, scheduled_jobs
from cronman.timeutil import utcnow
from cronman.vocabulary import MANUAL_ORIGINS, RUN_STATUSES, RunStatus

sj = scheduled_jobs
_ONE_US = timedelta(microseconds=1)
_DAY = timedelta(days=1)
NOT_FIRED = (RunStatus.SKIPPED.value,)
FAILED = (RunStatus.FAILED.value, RunStatus.LOST.value)
# Fires all the same, but not lateness (vocabulary.MANUAL_ORIGINS): left out
# of the percentiles, whatever lateness their rows hold (rows written before
# it was measured from the request hold their age).
MANUAL = tuple(o.value for o in MANUAL_ORIGINS)
P50, P99 = 0.5, 0.99

_PG_STATS_SQL = """
SELECT floor(extract(epoch FROM scheduled_for) / :step)::bigint AS step_no,
       count(*) FILTER (WHERE status NOT IN :not_fired) AS fires,
       count(*) FILTER (WHERE status IN :failed) AS failures,
       percentile_disc(:p50) WITHIN GROUP (ORDER BY lateness_ms)
           FILTER (WHERE origin NOT IN :manual) AS p50,
       percentile_disc(:p99) WITHIN GROUP (ORDER BY lateness_ms)
           FILTER (WHERE origin NOT IN :manual) AS p99
FROM scheduled_jobs
WHERE scheduled_for >= :since AND scheduled_for < :until{scope}
GROUP BY step_no
ORDER BY step_no
"""
_SCOPE_SQL = " AND job_id IN (SELECT id FROM jobs WHERE {conds})"


def _day_start(t: datetime) -> datetime:
    t = t.astimezone(UTC)
    return datetime(t.year, t.month, t.day, tzinfo=UTC)


def search_windows(since: datetime, hi: datetime | None, now: datetime
                   ) -> list[tuple[datetime, datetime | None]]:
    """Newest-first, disjoint [lo, hi) slices covering [since, hi): the UTC day
    holding the newest instant (``hi``, or ``now`` when open), then slices of
    1, 2, 4, ... days before it, the last one cut at ``since``."""
    if hi is not None and hi <= since:
        return []
    edge = _day_start((hi - _ONE_US) if hi is not None else max(now, since))
    edge = max(edge, since)
    windows: list[tuple[datetime, datetime | None]] = [(edge, hi)]
    width = _DAY
    while edge > since:
        # Compared before subtracting: a far ``hi`` (year 9999) would take the
        # doubled width below year 1 (an OverflowError).
        lo = since if edge - since <= width else edge - width
        windows.append((lo, edge))
        edge = lo
        width *= 2
    return windows


def _scope_conditions(db: Database, query: RunSearch | RunStatsQuery
                      ) -> list[ColumnElement[bool]]:
    """Conditions on ``jobs`` that a run's job must meet (empty: any job)."""
    conds: list[ColumnElement[bool]] = []
    if query.namespace is not None:
        conds.append(jobs.c.namespace == query.namespace)
    if query.namespaces is not None:
        conds.append(jobs.c.namespace.in_(list(query.namespaces)))
    kinds = getattr(query, "target_kinds", ())
    if kinds:
        conds.append(json_field_text(jobs.c.target, "kind", db.dialect).in_(list(kinds)))
    return conds


def _run_conditions(db: Database, query: RunSearch) -> list[ColumnElement[bool]]:
    conds: list[ColumnElement[bool]] = []
    if query.job_ids:
        conds.append(sj.c.job_id.in_(list(query.job_ids)))
    scope = _scope_conditions(db, query)
    if scope:
        conds.append(sj.c.job_id.in_(select(jobs.c.id).where(*scope)))
    return conds


def _newest_first(stmt: Select[Any], need: int) -> Select[Any]:
    return stmt.order_by(sj.c.scheduled_for.desc(), sj.c.id.desc()).limit(need)


def _pg_slice(statuses: Sequence[str], conds: list[ColumnElement[bool]], need: int
              ) -> Select[Any]:
    """The newest ``need`` rows of one slice: one index range per status, merged."""
    branches = [_newest_first(select(sj).where(sj.c.status == s, *conds), need)
                for s in statuses]
    if len(branches) == 1:
        return branches[0]
    merged = union_all(*branches).subquery("runs")
    return (select(merged).order_by(merged.c.scheduled_for.desc(), merged.c.id.desc())
            .limit(need))


def search_runs(db: Database, query: RunSearch, limit: int, cursor: str | None, *,
                now: datetime) -> Page:
    """See ``RunStore.search_runs``."""
    conds = [sj.c.scheduled_for >= query.since, *_run_conditions(db, query)]
    if query.statuses:
        conds.append(sj.c.status.in_(list(query.statuses)))
    hi = query.until
    if cursor:
        after_t, after_id = decode_search_cursor(cursor)
        conds.append(tuple_(sj.c.scheduled_for, sj.c.id) < tuple_(
            bindparam("c_t", after_t, type_=UTCDateTime()), bindparam("c_id", after_id)))
        hi = after_t + _ONE_US if hi is None else min(hi, after_t + _ONE_US)
    if hi is not None:
        conds.append(sj.c.scheduled_for < hi)
    statuses = list(query.statuses) or [s.value for s in RUN_STATUSES]
    rows: list[Any] = []
    with db.read() as conn:
        if not partitioned_history(db.dialect):
            rows = list(conn.execute(_newest_first(select(sj).where(*conds), limit + 1)))
        else:
            for lo, top in search_windows(query.since, hi, now):
                need = limit + 1 - len(rows)
                if need <= 0:
                    break
                window = [sj.c.scheduled_for >= lo]
                if top is not None:
                    window.append(sj.c.scheduled_for < top)
                rows.extend(conn.execute(_pg_slice(statuses, [*conds, *window], need)))
    items = [run_from_row(r) for r in rows[:limit]]
    next_cursor = None
    if len(rows) > limit and items:
        next_cursor = encode_search_cursor(items[-1].scheduled_for, items[-1].id)
    return Page(items, next_cursor)


# -- statistics -------------------------------------------------------------


def percentile(sorted_values: Sequence[int], p: float) -> int | None:
    """Nearest rank (PostgreSQL's ``percentile_disc``): the smallest value
    with at least a fraction ``p`` of the values at or below it."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(p * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def _step_start(step_no: int, step: int) -> datetime:
    return datetime.fromtimestamp(step_no * step, UTC)


def run_stats(db: Database, query: RunStatsQuery) -> list[RunStatsBucket]:
    """See ``RunStore.run_stats``."""
    step = int(query.step_seconds)
    if step <= 0:
        raise ValueError("step_seconds must be > 0")
    with db.read() as conn:
        if sql_percentiles(db.dialect):
            return _pg_stats(conn, db, query, step)
        return _sqlite_stats(conn, db, query, step)


def _pg_stats(conn: Connection, db: Database, query: RunStatsQuery, step: int
              ) -> list[RunStatsBucket]:
    params: dict[str, Any] = {"step": step, "since": query.since, "until": query.until,
                              "not_fired": NOT_FIRED, "failed": FAILED, "manual": MANUAL,
                              "p50": P50, "p99": P99}
    binds = [bindparam("not_fired", expanding=True), bindparam("failed", expanding=True),
             bindparam("manual", expanding=True),
             bindparam("since", type_=UTCDateTime()), bindparam("until", type_=UTCDateTime())]
    scope: list[str] = []
    if query.namespace is not None:
        scope.append("namespace = :namespace")
        params["namespace"] = query.namespace
    if query.namespaces is not None:
        if not query.namespaces:
            return []
        scope.append("namespace IN :namespaces")
        params["namespaces"] = list(query.namespaces)
        binds.append(bindparam("namespaces", expanding=True))
    sql = _PG_STATS_SQL.format(
        scope=_SCOPE_SQL.format(conds=" AND ".join(scope)) if scope else "")
    rows = conn.execute(text(sql).bindparams(*binds), params)
    return [RunStatsBucket(start=_step_start(int(r.step_no), step), fires=int(r.fires),
                           failures=int(r.failures),
                           lateness_p50_ms=None if r.p50 is None else int(r.p50),
                           lateness_p99_ms=None if r.p99 is None else int(r.p99))
            for r in rows]


def _sqlite_stats(conn: Connection, db: Database, query: RunStatsQuery, step: int
                  ) -> list[RunStatsBucket]:
    conds: list[ColumnElement[bool]] = [sj.c.scheduled_for >= query.since,
                                        sj.c.scheduled_for < query.until]
    scope = _scope_conditions(db, query)
    if scope:
        conds.append(sj.c.job_id.in_(select(jobs.c.id).where(*scope)))
    stmt = select(sj.c.scheduled_for, sj.c.status, sj.c.lateness_ms, sj.c.origin).where(*conds)
    steps: dict[int, tuple[list[int], list[int]]] = {}  # step -> ([fires, failures], lateness)
    for t, status, lateness, origin in conn.execute(stmt):
        step_no = math.floor(t.timestamp() / step)
        counts, late = steps.setdefault(step_no, ([0, 0], []))
        if status not in NOT_FIRED:
            counts[0] += 1
        if status in FAILED:
            counts[1] += 1
        if lateness is not None and origin not in MANUAL:
            late.append(int(lateness))
    out = []
    for n, (counts, late) in sorted(steps.items()):
        late.sort()
        out.append(RunStatsBucket(start=_step_start(n, step), fires=counts[0],
                                  failures=counts[1], lateness_p50_ms=percentile(late, P50),
                                  lateness_p99_ms=percentile(late, P99)))
    return out


class RunQueries:
    """``search_runs`` and ``run_stats`` of the SQL run store (mixed into
    ``SqlRunStore``, which sets ``_db``)."""

    _db: Database

    def search_runs(self, query: RunSearch, limit: int, cursor: str | None) -> Page:
        """See ``RunStore.search_runs``."""
        return search_runs(self._db, query, limit, cursor, now=utcnow())

    def run_stats(self, query: RunStatsQuery) -> list[RunStatsBucket]:
        """See ``RunStore.run_stats``."""
        return run_stats(self._db, query)
