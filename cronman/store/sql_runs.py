"""RunStore on SQLAlchemy Core: the hot path of the scheduler and the run history.

Batches are sets, never loops of statements: ``claim_runs`` is one
``INSERT ... ON CONFLICT DO NOTHING RETURNING id`` per 1000 runs plus one
cursor UPDATE, ``write_run_updates`` one ``UPDATE ... FROM (VALUES ...)`` per
1000 updates on PostgreSQL (an executemany on SQLite, which has no network
round trip), ``renew_leases`` one UPDATE per 1000 keys; each call is one
transaction. Every statement that targets known runs carries their
``scheduled_for`` (read back from the run id where needed) so PostgreSQL
prunes the daily partitions at plan time. A node's updates are fenced on its
node id: a run taken from it (by a sweeper, a takeover) keeps the outcome its
new holder writes.

API requests (trigger, replay, backfill) store runs with status ``claimed``
and no node; ``take_requested_runs`` hands them to a node (``FOR UPDATE SKIP
LOCKED`` on PostgreSQL; SQLite writers are serialised).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any

from sqlalchemy import (
    BigInteger,
    Integer,
    String,
    bindparam,
    case,
    func,
    or_,
    select,
    text,
    tuple_,
    update,
)
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.sql.elements import ColumnElement

from cronman.errors import Conflict, NotFound, StoreUnavailable
from cronman.ids import run_id_for, scheduled_for_of_run_id
from cronman.models import Job, Page, Run, RunFilter, RunUpdate
from cronman.store import history
from cronman.store.base import RUNS_REQUESTED, Fenced
from cronman.store.codec import (
    RUN_FIELDS,
    decode_run_cursor,
    encode_run_cursor,
    merge_updates,
    run_from_row,
    run_values,
)
from cronman.store.engine import Database, Tx
from cronman.store.history import ChangeContext
from cronman.store.pgsql import (
    execute_rendered,
    fetch_rendered,
    render_literal,
    render_values,
)
from cronman.store.run_search import RunQueries
from cronman.store.tables import (
    FINAL_STATUSES,
    IN_FLIGHT_STATUSES,
    JsonType,
    NullableJsonType,
    UTCDateTime,
    job_edges,
    jobs,
    scheduled_jobs,
)
from cronman.store.triggers import SucceededRun, SuccessHook
from cronman.timeutil import format_rfc3339, from_ms, to_ms, utcnow

log = logging.getLogger(__name__)

sj = scheduled_jobs
BATCH = 1000
_ONE_MS = timedelta(milliseconds=1)
RECENT_WINDOW = timedelta(days=1)

_PG_UPDATE_COLUMNS = ("id", "scheduled_for", "status", "attempt", "started_at", "finished_at",
                      "lateness_ms", "duration_ms", "result", "error", "lease_expires_at",
                      "next_attempt_at", "gate")
_PG_UPDATE_TEMPLATE = ("(%s, %s::timestamptz, %s, %s::int, %s::timestamptz, %s::timestamptz, "
                       "%s::bigint, %s::bigint, %s::jsonb, %s::text, %s::timestamptz, "
                       "%s::timestamptz, %s::jsonb)")
_PG_UPDATE_SQL = """
UPDATE scheduled_jobs AS t SET
  status = v.status,
  attempt = COALESCE(v.attempt, t.attempt),
  started_at = COALESCE(v.started_at, t.started_at),
  finished_at = COALESCE(v.finished_at, t.finished_at),
  lateness_ms = COALESCE(v.lateness_ms, t.lateness_ms),
  duration_ms = COALESCE(v.duration_ms, t.duration_ms),
  result = v.result,
  error = v.error,
  lease_expires_at = COALESCE(v.lease_expires_at, t.lease_expires_at),
  next_attempt_at = COALESCE(v.next_attempt_at, t.next_attempt_at),
  gate = COALESCE(v.gate, t.gate)
FROM (VALUES {values}) AS v({columns})
WHERE t.id = v.id AND t.scheduled_for = v.scheduled_for
  AND t.scheduled_for BETWEEN {lo} AND {hi}{fence}
"""
# The same, for a chunk holding successes: the runs it made succeeded whose
# job is an upstream of another come back (a few rows), for the triggers.
_PG_UPDATE_SUCCEEDED_SQL = ("WITH u AS (" + _PG_UPDATE_SQL.rstrip()
                            + "\nRETURNING t.id, t.job_id, t.scheduled_for, t.attempt, t.status)"
                            "\nSELECT u.id, u.job_id, u.scheduled_for, u.attempt FROM u"
                            "\nWHERE u.status = 'succeeded'"
                            " AND u.job_id IN (SELECT upstream_id FROM job_edges)")
# No conflict target: the run id is derived from (job_id, scheduled_for), so
# a repeated claim collides on the primary key (id, scheduled_for) as well as
# on the (job_id, scheduled_for) fence. With a target, only the named index
# arbitrates; two nodes inserting the same new row at the same moment then
# get a unique violation on the primary key (an error that loses the whole
# batch) instead of one of them skipping the row.
_PG_INSERT_SQL = (f"INSERT INTO scheduled_jobs ({', '.join(RUN_FIELDS)}) VALUES {{values}} "
                  "ON CONFLICT DO NOTHING RETURNING id")
_JSON_RUN_FIELDS = frozenset({"result", "gate"})
_PG_INSERT_TEMPLATE = "(" + ", ".join("%s::jsonb" if c in _JSON_RUN_FIELDS else "%s"
                                      for c in RUN_FIELDS) + ")"
_PG_CURSOR_SQL = """
UPDATE jobs AS j SET
  last_fire_at = GREATEST(j.last_fire_at, v.t),
  skipped_pending = CASE WHEN j.last_fire_at IS NULL OR j.last_fire_at <= v.t
                         THEN v.skipped ELSE j.skipped_pending END
FROM (VALUES {values}) AS v(id, t, skipped)
WHERE j.id = v.id
"""
_LAST_RUNS_SQL = """
SELECT r.* FROM unnest(CAST(:ids AS text[])) AS j(id)
CROSS JOIN LATERAL (
  SELECT * FROM scheduled_jobs s WHERE s.job_id = j.id {extra}
  ORDER BY s.scheduled_for DESC LIMIT 1
) AS r
"""
_PG_LAST_RUNS = text(_LAST_RUNS_SQL.format(extra="")).columns(*sj.c)
_PG_LAST_RUNS_SINCE = (text(_LAST_RUNS_SQL.format(extra="AND s.scheduled_for >= :since"))
                       .bindparams(bindparam("since", type_=UTCDateTime()))
                       .columns(*sj.c))

# SQLite: one executemany statement for the whole batch of updates.
_SQLITE_KEY = (sj.c.id == bindparam("u_id"),
               sj.c.scheduled_for == bindparam("u_scheduled_for", type_=UTCDateTime()))
_SQLITE_UPDATE_VALUES = dict(
    status=bindparam("u_status", type_=String()),
    attempt=func.coalesce(bindparam("u_attempt", type_=Integer()), sj.c.attempt),
    started_at=func.coalesce(bindparam("u_started_at", type_=UTCDateTime()), sj.c.started_at),
    finished_at=func.coalesce(bindparam("u_finished_at", type_=UTCDateTime()),
                              sj.c.finished_at),
    lateness_ms=func.coalesce(bindparam("u_lateness_ms", type_=BigInteger()), sj.c.lateness_ms),
    duration_ms=func.coalesce(bindparam("u_duration_ms", type_=BigInteger()), sj.c.duration_ms),
    result=bindparam("u_result", type_=JsonType),
    error=bindparam("u_error", type_=String()),
    lease_expires_at=func.coalesce(bindparam("u_lease_expires_at", type_=UTCDateTime()),
                                   sj.c.lease_expires_at),
    next_attempt_at=func.coalesce(bindparam("u_next_attempt_at", type_=UTCDateTime()),
                                  sj.c.next_attempt_at),
    gate=func.coalesce(bindparam("u_gate", type_=NullableJsonType), sj.c.gate),
)
_SQLITE_UPDATE = update(sj).where(*_SQLITE_KEY).values(**_SQLITE_UPDATE_VALUES)
_SQLITE_UPDATE_FENCED = (update(sj).where(*_SQLITE_KEY, sj.c.node_id == bindparam("u_node_id"))
                         .values(**_SQLITE_UPDATE_VALUES))
_c_t = bindparam("c_t", type_=UTCDateTime())
_SQLITE_CURSOR = (
    update(jobs)
    .where(jobs.c.id == bindparam("c_id"))
    .values(
        last_fire_at=case((or_(jobs.c.last_fire_at.is_(None), jobs.c.last_fire_at < _c_t), _c_t),
                          else_=jobs.c.last_fire_at),
        skipped_pending=case((or_(jobs.c.last_fire_at.is_(None), jobs.c.last_fire_at <= _c_t),
                              bindparam("c_skipped", type_=BigInteger())),
                             else_=jobs.c.skipped_pending),
    )
)


def _chunks(items: Sequence[Any], size: int = BATCH) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def _run_key_range(run_id: str) -> tuple[datetime, datetime] | None:
    """The [from, to) range of scheduled_for a run id allows (ids carry milliseconds)."""
    t = scheduled_for_of_run_id(run_id)
    return None if t is None else (t, t + _ONE_MS)


class SqlRunStore(RunQueries):
    """Runs: the fence, the write-back of results, leases, and the history."""

    def __init__(self, db: Database,
                 prepare_days: Callable[[Iterable[date]], object] | None = None,
                 on_succeeded: SuccessHook | None = None) -> None:
        self._db = db
        # Called before a backfill stores runs: creates missing daily partitions.
        self._prepare_days = prepare_days
        # Called in the transaction of a write that made runs of upstream jobs
        # succeed (cronman.store.triggers: announcements, ``after`` runs).
        self._on_succeeded = on_succeeded
        self._insert_new = sqlite_insert(sj).on_conflict_do_nothing().returning(sj.c.id)

    # -- the fence ---------------------------------------------------------

    def _insert_runs(self, tx: Tx, rows: list[dict[str, Any]]) -> set[str]:
        # A consistent order keeps two nodes inserting the same keys from deadlocking.
        rows.sort(key=lambda r: (r["job_id"], r["scheduled_for"]))
        inserted: set[str] = set()
        for chunk in _chunks(rows):
            if tx.dialect == "postgresql":
                # Rendered by psycopg2 directly: SQLAlchemy's per-row parameter
                # handling costs several times more CPU than the statement.
                values = render_values(tx.conn, _PG_INSERT_TEMPLATE, [
                    tuple(json.dumps(r[c]) if c in _JSON_RUN_FIELDS and r[c] is not None
                          else r[c] for c in RUN_FIELDS) for r in chunk])
                found = fetch_rendered(tx.conn, _PG_INSERT_SQL.format(values=values))
                inserted.update(row[0] for row in found)
            else:
                inserted.update(tx.conn.execute(self._insert_new, list(chunk)).scalars())
        return inserted

    def claim_runs(
        self, runs: Sequence[Run], cursors: Sequence[tuple[str, datetime, int]] = (), *,
        max_ahead_ms: int | None = None,
    ) -> Fenced:
        if not runs and not cursors:
            return Fenced()
        rows = [run_values(r) for r in runs]

        def fn(tx: Tx) -> Fenced:
            keep, advance, early = rows, cursors, set[str]()
            if max_ahead_ms is not None:
                limit = from_ms(tx.now_ms() + max_ahead_ms)
                keep = [r for r in rows if r["scheduled_for"] <= limit]
                early = {r["id"] for r in rows if r["scheduled_for"] > limit}
                advance = [c for c in cursors if c[1] <= limit]
            inserted = self._insert_runs(tx, keep) if keep else set()
            if advance:
                self._advance_cursors(tx, advance)
            return Fenced(inserted, early)

        return self._db.write(fn)

    def _advance_cursors(self, tx: Tx, cursors: Sequence[tuple[str, datetime, int]]) -> None:
        latest: dict[str, tuple[datetime, int]] = {}
        for job_id, fire_time, skipped in cursors:
            prev = latest.get(job_id)
            if prev is None or fire_time >= prev[0]:
                latest[job_id] = (fire_time, skipped)
        items = sorted(latest.items())
        if tx.dialect == "postgresql":
            for chunk in _chunks(items):
                values = render_values(tx.conn, "(%s, %s::timestamptz, %s::bigint)",
                                       [(jid, t, n) for jid, (t, n) in chunk])
                execute_rendered(tx.conn, _PG_CURSOR_SQL.format(values=values))
        else:
            tx.conn.execute(_SQLITE_CURSOR, [{"c_id": jid, "c_t": t, "c_skipped": n}
                                             for jid, (t, n) in items])

    # -- write-back --------------------------------------------------------

    def write_run_updates(self, updates: Sequence[RunUpdate],
                          node_id: str | None = None) -> None:
        if not updates:
            return
        merged = merge_updates(list(updates))
        plain = [u for u in merged if not u.extra]
        extra = [u for u in merged if u.extra]

        hook = self._on_succeeded

        def fn(tx: Tx) -> None:
            succeeded: list[SucceededRun] = []
            if plain:
                if tx.dialect == "postgresql":
                    succeeded += self._pg_updates(tx, plain, node_id, hook is not None)
                else:
                    if node_id is None:
                        tx.conn.execute(_SQLITE_UPDATE,
                                        [_sqlite_update_params(u) for u in plain])
                    else:
                        tx.conn.execute(_SQLITE_UPDATE_FENCED,
                                        [{**_sqlite_update_params(u), "u_node_id": node_id}
                                         for u in plain])
                    if hook is not None:
                        succeeded += _sqlite_upstream_successes(tx, plain)
            for u in extra:  # rare: updates that also set other columns
                values = {name: getattr(u, name) for name in _PG_UPDATE_COLUMNS[2:]
                          if getattr(u, name) is not None or name in ("result", "error")}
                values.update(u.extra)
                where = [sj.c.id == u.id, sj.c.scheduled_for == u.scheduled_for]
                if node_id is not None and "node_id" not in u.extra:
                    where.append(sj.c.node_id == node_id)
                stmt = update(sj).where(*where).values(**values)
                if hook is not None and u.status == "succeeded":
                    succeeded += [SucceededRun(*row) for row in tx.conn.execute(stmt.returning(
                        sj.c.id, sj.c.job_id, sj.c.scheduled_for, sj.c.attempt))]
                else:
                    tx.conn.execute(stmt)
            if succeeded and hook is not None:
                hook(tx, succeeded)

        self._db.write(fn)

    def _pg_updates(self, tx: Tx, updates: list[RunUpdate], node_id: str | None,
                    want_successes: bool) -> list[SucceededRun]:
        """The batch UPDATE; with ``want_successes``, the runs it made
        succeeded whose job others depend on."""
        fence = "" if node_id is None else f"\n  AND t.node_id = {render_literal(tx.conn, node_id)}"
        updates.sort(key=lambda u: (u.scheduled_for, u.id))
        found: list[SucceededRun] = []
        for chunk in _chunks(updates):
            rows = [(u.id, u.scheduled_for, u.status, u.attempt, u.started_at, u.finished_at,
                     u.lateness_ms, u.duration_ms,
                     None if u.result is None else json.dumps(u.result), u.error,
                     u.lease_expires_at, u.next_attempt_at,
                     None if u.gate is None else json.dumps(u.gate)) for u in chunk]
            successes = want_successes and any(u.status == "succeeded" for u in chunk)
            sql = (_PG_UPDATE_SUCCEEDED_SQL if successes else _PG_UPDATE_SQL).format(
                values=render_values(tx.conn, _PG_UPDATE_TEMPLATE, rows),
                columns=", ".join(_PG_UPDATE_COLUMNS),
                lo=render_literal(tx.conn, chunk[0].scheduled_for),
                hi=render_literal(tx.conn, chunk[-1].scheduled_for),
                fence=fence,
            )
            if successes:
                found += [SucceededRun(*row) for row in fetch_rendered(tx.conn, sql)]
            else:
                execute_rendered(tx.conn, sql)
        return found

    # -- leases ------------------------------------------------------------

    def renew_leases(
        self, node_id: str, keys: Sequence[tuple[str, datetime]], until: datetime
    ) -> int:
        if not keys:
            return 0
        ordered = sorted(set(keys), key=lambda k: (k[1], k[0]))

        def fn(tx: Tx) -> int:
            count = 0
            for chunk in _chunks(ordered):
                stmt = (update(sj)
                        .where(sj.c.node_id == node_id,
                               sj.c.status.in_(IN_FLIGHT_STATUSES),
                               tuple_(sj.c.id, sj.c.scheduled_for).in_(list(chunk)),
                               sj.c.scheduled_for.in_(sorted({k[1] for k in chunk})))
                        .values(lease_expires_at=until))
                count += tx.conn.execute(stmt).rowcount
            return count

        return self._db.write(fn)

    def start_claimed_runs(
        self, node_id: str, keys: Sequence[tuple[str, datetime]], started_at: datetime,
        lease_until: datetime, holder: str | None = None,
    ) -> set[str]:
        if not keys:
            return set()
        ordered = sorted(set(keys), key=lambda k: (k[1], k[0]))

        def fn(tx: Tx) -> set[str]:
            changed: set[str] = set()
            for chunk in _chunks(ordered):
                where = [sj.c.status == "claimed", sj.c.started_at.is_(None),
                         tuple_(sj.c.id, sj.c.scheduled_for).in_(list(chunk)),
                         sj.c.scheduled_for.in_(sorted({k[1] for k in chunk}))]
                if holder is not None:
                    where.append(sj.c.node_id == holder)
                stmt = (update(sj).where(*where)
                        .values(node_id=node_id, status="running", started_at=started_at,
                                lease_expires_at=lease_until)
                        .returning(sj.c.id))
                changed.update(tx.conn.execute(stmt).scalars())
            return changed

        return self._db.write(fn)

    def _take(self, where: list[ColumnElement[bool]], order: Any, node_id: str,
              lease_until: datetime, limit: int) -> list[Run]:
        """Lock up to ``limit`` matching rows (``FOR UPDATE SKIP LOCKED``: a
        concurrent taker skips them) and assign them, in one transaction.

        Two statements on purpose: with the pick as a subquery of the UPDATE,
        PostgreSQL joins it by hashing and scans every partition; with the
        picked keys as literals the UPDATE prunes to their partitions and
        uses the primary key.
        """
        if limit <= 0:
            return []
        pick = select(sj.c.id, sj.c.scheduled_for).where(*where).order_by(order).limit(limit)
        if self._db.is_postgres:
            pick = pick.with_for_update(skip_locked=True)

        def fn(tx: Tx) -> list[Any]:
            keys = tx.conn.execute(pick).all()
            if not keys:
                return []
            stmt = (update(sj)
                    .where(tuple_(sj.c.id, sj.c.scheduled_for).in_([tuple(k) for k in keys]),
                           sj.c.scheduled_for.in_(sorted({k[1] for k in keys})))
                    .values(node_id=node_id, lease_expires_at=lease_until)
                    .returning(*sj.c))
            return list(tx.conn.execute(stmt).all())

        runs = [run_from_row(r) for r in self._db.write(fn)]
        runs.sort(key=lambda r: (r.scheduled_for, r.id))
        return runs

    def take_requested_runs(self, node_id: str, lease_until: datetime, limit: int) -> list[Run]:
        return self._take([sj.c.status == "claimed", sj.c.node_id.is_(None)],
                          sj.c.scheduled_for, node_id, lease_until, limit)

    def take_expired_runs(self, node_id: str, now: datetime, lease_until: datetime,
                          limit: int, spare: Sequence[str] = (),
                          spare_before: datetime | None = None) -> list[Run]:
        where = [sj.c.status.in_(IN_FLIGHT_STATUSES), sj.c.node_id.is_not(None),
                 sj.c.lease_expires_at < now]
        if spare:
            where.append(or_(sj.c.node_id.not_in(sorted(set(spare))),
                             sj.c.lease_expires_at < (spare_before or now)))
        return self._take(where, sj.c.lease_expires_at, node_id, lease_until, limit)

    # -- reads -------------------------------------------------------------

    def get_run(self, run_id: str) -> Run | None:
        span = _run_key_range(run_id)
        if span is None:
            return None
        stmt = select(sj).where(sj.c.id == run_id, sj.c.scheduled_for >= span[0],
                                sj.c.scheduled_for < span[1])
        with self._db.read() as conn:
            row = conn.execute(stmt).first()
        return None if row is None else run_from_row(row)

    def _recent_split(self) -> datetime | None:
        """Where "recent" history starts (PostgreSQL only): yesterday 00:00 UTC.

        A query ordered by scheduled_for over every partition is planned
        over all ~50 of them and its Merge Append probes each; most answers
        (a job's newest runs) lie in the last day, so the store asks the
        recent partitions first and the older ones only for what is missing.
        """
        if not self._db.is_postgres:
            return None
        now = utcnow()
        return datetime(now.year, now.month, now.day, tzinfo=UTC) - RECENT_WINDOW

    def _windows(self, lo: datetime | None, hi: datetime | None
                 ) -> list[list[ColumnElement[bool]]]:
        """Newest-first, disjoint scheduled_for windows covering [lo, hi)."""
        split = self._recent_split()
        if split is None:
            return [[]]
        windows: list[list[ColumnElement[bool]]] = []
        if hi is None or hi > split:
            windows.append([sj.c.scheduled_for >= split])
        if lo is None or lo < split:
            windows.append([sj.c.scheduled_for < split])
        return windows

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
            for window in self._windows(flt.since, hi):
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
        ids = list(dict.fromkeys(job_ids))
        if not ids:
            return {}
        found: dict[str, Run] = {}
        with self._db.read() as conn:
            if self._db.is_postgres:
                # Recent partitions first (see _recent_split), then the rest
                # for the jobs without a recent run.
                split = self._recent_split()
                for stmt, params in ((_PG_LAST_RUNS_SINCE, {"since": split}),
                                     (_PG_LAST_RUNS, {})):
                    missing = [i for i in ids if i not in found]
                    for chunk in _chunks(missing):
                        for row in conn.execute(stmt, {"ids": list(chunk), **params}):
                            run = run_from_row(row)
                            found[run.job_id] = run
            else:
                one = (select(sj).where(sj.c.job_id == bindparam("jid"))
                       .order_by(sj.c.scheduled_for.desc()).limit(1))
                for jid in ids:
                    last = conn.execute(one, {"jid": jid}).first()
                    if last is not None:
                        found[jid] = run_from_row(last)
        return found

    def in_flight_runs(self, job_ids: Sequence[str]) -> dict[str, list[Run]]:
        ids = list(dict.fromkeys(job_ids))
        found: dict[str, list[Run]] = {}
        with self._db.read() as conn:
            for chunk in _chunks(ids):
                stmt = (select(sj).where(sj.c.status.in_(IN_FLIGHT_STATUSES),
                                         sj.c.job_id.in_(list(chunk)))
                        .order_by(sj.c.scheduled_for))
                for row in conn.execute(stmt):
                    run = run_from_row(row)
                    found.setdefault(run.job_id, []).append(run)
        return found

    # -- API requests ------------------------------------------------------

    def request_trigger(self, job: Job, at: datetime,
                        change: ChangeContext | None = None) -> Run:
        """A manual fire at ``at`` (truncated to the millisecond, the precision
        of run ids). ``Conflict`` if the job already has a run at that time."""
        at = from_ms(to_ms(at))
        run = Run(id=run_id_for(job.id, at), job_id=job.id, scheduled_for=at, status="claimed",
                  attempt=0, node_id=None, origin="trigger", claimed_at=utcnow())

        def fn(tx: Tx) -> None:
            if not self._insert_runs(tx, [run_values(run)]):
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
        attempt under way; ``skipped_before`` is kept."""
        span = _run_key_range(run_id)
        if span is None:
            raise NotFound(f"no run {run_id}")
        key = [sj.c.id == run_id, sj.c.scheduled_for >= span[0], sj.c.scheduled_for < span[1]]
        stmt = (update(sj)
                .where(*key, sj.c.status.in_(FINAL_STATUSES))
                .values(status="claimed", node_id=None, attempt=sj.c.attempt + 1,
                        origin="replay", claimed_at=utcnow(), started_at=None,
                        finished_at=None, lateness_ms=None, duration_ms=None, result=None,
                        error=None, lease_expires_at=None, next_attempt_at=None)
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
                         change: ChangeContext | None = None) -> int:
        times = sorted({from_ms(to_ms(t)) for t in fire_times})
        if not times:
            return 0
        if self._prepare_days is not None:
            try:
                self._prepare_days({t.date() for t in times})
            except StoreUnavailable as exc:  # the rows then go to the default partition
                log.warning("backfill: could not create partitions: %s", exc)
        now = utcnow()
        rows = [run_values(Run(id=run_id_for(job.id, t), job_id=job.id, scheduled_for=t,
                               status="claimed", attempt=0, node_id=None, origin="backfill",
                               claimed_at=now)) for t in times]

        def fn(tx: Tx) -> int:
            count = len(self._insert_runs(tx, rows))
            history.requested(tx, change, job.id, {"requested": count,
                                                   "fire_times": len(times)})
            if count:
                tx.announce([RUNS_REQUESTED])
            return count

        return self._db.write(fn)


def _sqlite_update_params(u: RunUpdate) -> dict[str, Any]:
    return {
        "u_id": u.id, "u_scheduled_for": u.scheduled_for, "u_status": u.status,
        "u_attempt": u.attempt, "u_started_at": u.started_at, "u_finished_at": u.finished_at,
        "u_lateness_ms": u.lateness_ms, "u_duration_ms": u.duration_ms, "u_result": u.result,
        "u_error": u.error, "u_lease_expires_at": u.lease_expires_at,
        "u_next_attempt_at": u.next_attempt_at, "u_gate": u.gate,
    }


def _sqlite_upstream_successes(tx: Tx, updates: Sequence[RunUpdate]) -> list[SucceededRun]:
    """The runs among ``updates`` now succeeded whose job others depend on
    (SQLite: read back after the executemany, in its transaction). A run
    whose update the fence refused but that is succeeded anyway comes back
    too: its trigger event is already recorded, so nothing is made twice."""
    ids = [u.id for u in updates if u.status == "succeeded"]
    found: list[SucceededRun] = []
    for chunk in _chunks(ids, 500):
        stmt = (select(sj.c.id, sj.c.job_id, sj.c.scheduled_for, sj.c.attempt)
                .where(sj.c.id.in_(list(chunk)), sj.c.status == "succeeded",
                       sj.c.job_id.in_(select(job_edges.c.upstream_id))))
        found += [SucceededRun(*row) for row in tx.conn.execute(stmt)]
    return found
