"""The run store's batch statements, where PostgreSQL and SQLite differ most.

Batches are sets, never loops of statements. PostgreSQL gets one statement
per ``BATCH`` rows with the ``VALUES`` list rendered by psycopg2 itself
(``cronman.store.pgsql``: SQLAlchemy's per-row parameter handling costs
several times more CPU than the statement); SQLite, which has no network
round trip, gets an executemany. PostgreSQL's writes go in a consistent
order (job then time, or time then id), so that two nodes writing the same
rows do not deadlock.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import orjson
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
    update,
)
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement

from cronman.models import Run, RunUpdate
from cronman.store.codec import RUN_FIELDS, run_from_row, run_values
from cronman.store.dialect import POSTGRESQL, recent_runs_start
from cronman.store.engine import Tx
from cronman.store.pgsql import (
    execute_prepared,
)
from cronman.store.tables import (
    JsonType,
    NullableJsonType,
    UTCDateTime,
    job_edges,
    jobs,
    scheduled_jobs,
)
from cronman.store.triggers import SucceededRun
from cronman.timeutil import utcnow

sj = scheduled_jobs
BATCH = 1000

# -- PostgreSQL ---------------------------------------------------------------

# No conflict target: the run id is derived from (job_id, scheduled_for), so
# a repeated claim collides on the primary key (id, scheduled_for) as well as
# on the (job_id, scheduled_for) fence. With a target, only the named index
# arbitrates; two nodes inserting the same new row at the same moment then
# get a unique violation on the primary key (an error that loses the whole
# batch) instead of one of them skipping the row.
_JSON_RUN_FIELDS = frozenset({"result", "gate"})
# The type of each run column, as the arrays the prepared statements take.
_PG_RUN_TYPES = {
    "id": "text", "job_id": "text", "scheduled_for": "timestamptz", "status": "text",
    "attempt": "int", "node_id": "text", "origin": "text", "claimed_at": "timestamptz",
    "started_at": "timestamptz", "finished_at": "timestamptz", "lateness_ms": "bigint",
    "duration_ms": "bigint", "result": "jsonb", "error": "text",
    "lease_expires_at": "timestamptz", "next_attempt_at": "timestamptz",
    "skipped_before": "bigint", "gate": "jsonb",
}
assert set(_PG_RUN_TYPES) == set(RUN_FIELDS)
# The rows come sorted (job, time); unnest keeps the arrays' order.
_PG_INSERT_SQL = (f"INSERT INTO scheduled_jobs ({', '.join(RUN_FIELDS)}) "
                  f"SELECT * FROM unnest({', '.join(f'${i}' for i in range(1, len(RUN_FIELDS) + 1))}) "
                  "ON CONFLICT DO NOTHING RETURNING id")
_PG_INSERT_TYPES = tuple(f"{_PG_RUN_TYPES[c]}[]" for c in RUN_FIELDS)
# The same for a batch of claims (``_claim_shaped``): four arrays, the rest
# one value for every row, the attempt's columns left NULL.
_PG_INSERT_CLAIMS_SQL = (
    "INSERT INTO scheduled_jobs (id, job_id, scheduled_for, skipped_before, status, attempt, "
    "node_id, origin, claimed_at, lease_expires_at) "
    "SELECT v.id, v.job_id, v.scheduled_for, v.skipped_before, $5, $6, $7, $8, $9, $10 "
    "FROM unnest($1, $2, $3, $4) AS v(id, job_id, scheduled_for, skipped_before) "
    "ON CONFLICT DO NOTHING RETURNING id")
_PG_INSERT_CLAIMS_TYPES = ("text[]", "text[]", "timestamptz[]", "bigint[]", "text", "int",
                           "text", "text", "timestamptz", "timestamptz")

# The columns a RunUpdate writes; the update keeps a column whose value is
# None, except result and error, which it clears.
UPDATE_COLUMNS = ("id", "scheduled_for", "status", "attempt", "started_at", "finished_at",
                  "lateness_ms", "duration_ms", "result", "error", "lease_expires_at",
                  "next_attempt_at", "gate")
_PG_UPDATE_TYPES = tuple(f"{_PG_RUN_TYPES[c]}[]" for c in UPDATE_COLUMNS)
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
FROM unnest({arrays}) AS v({columns})
WHERE t.id = v.id AND t.scheduled_for = v.scheduled_for
  AND t.scheduled_for = ANY($2){fence}
"""
# The same, for a chunk holding successes: the runs it made succeeded whose
# job is an upstream of another come back (a few rows), for the triggers.
_PG_UPDATE_SUCCEEDED_SQL = ("WITH u AS (" + _PG_UPDATE_SQL.rstrip()
                            + "\nRETURNING t.id, t.job_id, t.scheduled_for, t.attempt, t.status)"
                            "\nSELECT u.id, u.job_id, u.scheduled_for, u.attempt FROM u"
                            "\nWHERE u.status = 'succeeded'"
                            " AND u.job_id IN (SELECT upstream_id FROM job_edges)")
_PG_CURSOR_SQL = """
UPDATE jobs AS j SET
  last_fire_at = GREATEST(j.last_fire_at, v.t),
  skipped_pending = CASE WHEN j.last_fire_at IS NULL OR j.last_fire_at <= v.t
                         THEN v.skipped ELSE j.skipped_pending END
FROM unnest($1, $2, $3) AS v(id, t, skipped)
WHERE j.id = v.id
"""
_PG_CURSOR_TYPES = ("text[]", "timestamptz[]", "bigint[]")
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

# -- SQLite -------------------------------------------------------------------

_SQLITE_INSERT = sqlite_insert(sj).on_conflict_do_nothing().returning(sj.c.id)
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
_SQLITE_LAST_RUN = (select(sj).where(sj.c.job_id == bindparam("jid"))
                    .order_by(sj.c.scheduled_for.desc()).limit(1))


def chunks(items: Sequence[Any], size: int = BATCH) -> Iterable[Sequence[Any]]:
    """``items`` in slices of at most ``size``."""
    for start in range(0, len(items), size):
        yield items[start:start + size]


_KEY_LOOKUP_PLANS = ("enable_seqscan", "enable_bitmapscan", "enable_hashjoin", "enable_mergejoin")
# One round trip each way (the simple query protocol takes several statements).
_KEY_LOOKUP_OFF = "; ".join(f"SET LOCAL {name} = off" for name in _KEY_LOOKUP_PLANS)
_KEY_LOOKUP_RESET = "; ".join(f"SET LOCAL {name} TO DEFAULT" for name in _KEY_LOOKUP_PLANS)


@contextmanager
def key_lookups(tx: Tx) -> Iterator[None]:
    """Keep the planner from scanning a partition for keyed run statements
    (PostgreSQL; nothing on SQLite).

    The run statements that join a ``VALUES`` list of keys name the keys'
    times for partition pruning, and new rows' times are past the statistics'
    histogram, so the planner's row estimates for them are guesses. With a
    time *range* it expected one row and scanned the whole partition (or the
    in-flight index) as the outer side of a nested loop, comparing each row
    with every key: seconds per batch once the day's partition held a few
    hundred thousand rows, which made a busy result writer fall further and
    further behind. Without sequential, bitmap, hash or merge plans, and with
    the times as a list, the result writer's batch probes each key through
    the primary key (``tests/integration/test_store_plans.py``). Set for the
    statements inside, reset after (a failed statement ends the transaction,
    and the settings with it).
    """
    if tx.dialect != POSTGRESQL:
        yield
        return
    tx.conn.exec_driver_sql(_KEY_LOOKUP_OFF)
    yield
    tx.conn.exec_driver_sql(_KEY_LOOKUP_RESET)


def by_keys(keys: Sequence[tuple[str, datetime]],
            statuses: Sequence[str] = ()) -> list[ColumnElement[bool]]:
    """Conditions for the run rows with these (id, scheduled_for) ``keys`` (at
    most ``BATCH``) and, when given, one of ``statuses``; for an UPDATE inside
    ``key_lookups``.

    The ids alone pick the rows (a run's id is unique by itself: derived from
    its job and time, or new), probed through the primary key; the times are
    there for partition pruning at plan time. The status is compared as an
    expression the in-flight index's predicate does not cover, so that index
    (whose row estimates lag far behind) is not a candidate.
    """
    conds: list[ColumnElement[bool]] = [
        sj.c.id.in_(sorted({k[0] for k in keys})),
        sj.c.scheduled_for.in_(sorted({k[1] for k in keys}))]
    if statuses:
        conds.append(sj.c.status.concat("").in_(list(statuses)))
    return conds


def insert_runs(tx: Tx, runs: Sequence[Run]) -> set[str]:
    """``INSERT ... ON CONFLICT DO NOTHING`` of ``runs``; the ids of the rows
    that went in."""
    runs = sorted(runs, key=lambda r: (r.job_id, r.scheduled_for))
    inserted: set[str] = set()
    for chunk in chunks(runs):
        if tx.dialect != POSTGRESQL:
            rows = [run_values(r) for r in chunk]
            inserted.update(tx.conn.execute(_SQLITE_INSERT, rows).scalars())
        elif _claim_shaped(chunk):
            first = chunk[0]
            found = execute_prepared(
                tx.conn, "cronman_insert_claims", _PG_INSERT_CLAIMS_SQL, _PG_INSERT_CLAIMS_TYPES,
                [[r.id for r in chunk], [r.job_id for r in chunk],
                 [r.scheduled_for for r in chunk], [r.skipped_before for r in chunk],
                 first.status, first.attempt, first.node_id, first.origin, first.claimed_at,
                 first.lease_expires_at])
            inserted.update(row[0] for row in found)
        else:
            rows = [run_values(r) for r in chunk]
            columns = [[_json_text(r[c]) if r[c] is not None else None for r in rows]
                       if c in _JSON_RUN_FIELDS else [r[c] for r in rows] for c in RUN_FIELDS]
            found = execute_prepared(tx.conn, "cronman_insert_runs", _PG_INSERT_SQL,
                                     _PG_INSERT_TYPES, columns)
            inserted.update(row[0] for row in found)
    return inserted


def _json_text(value: Any) -> str:
    """A JSON value's text for a jsonb column: orjson (several times the
    standard encoder's speed; strings were made storable already), or the
    standard encoder for what orjson refuses (keys that are not strings,
    integers past 64 bits, deep nesting), as before."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return json.dumps(value, default=str)


def _claim_shaped(runs: Sequence[Run]) -> bool:
    """Whether ``runs`` are claims made together: one status, attempt, node,
    origin, claim time and lease, and nothing of an attempt yet (the claims
    of a node's batch of fires: ``_PG_INSERT_CLAIMS_SQL`` sends just what
    differs per row)."""
    first = runs[0]
    shared = (first.status, first.attempt, first.node_id, first.origin, first.claimed_at,
              first.lease_expires_at)
    return all((r.status, r.attempt, r.node_id, r.origin, r.claimed_at, r.lease_expires_at)
               == shared and r.started_at is None and r.finished_at is None
               and r.lateness_ms is None and r.duration_ms is None and r.result is None
               and r.error is None and r.next_attempt_at is None and r.gate is None
               for r in runs)


def advance_cursors(tx: Tx, items: Sequence[tuple[str, tuple[datetime, int]]]) -> None:
    """Move each job's cursor to (fire time, skipped) of ``items`` (sorted by
    job id), never back: ``last_fire_at`` only grows."""
    if tx.dialect == POSTGRESQL:
        for chunk in chunks(items):
            execute_prepared(tx.conn, "cronman_advance_cursors", _PG_CURSOR_SQL,
                             _PG_CURSOR_TYPES, [[jid for jid, _ in chunk],
                                                [t for _, (t, _) in chunk],
                                                [n for _, (_, n) in chunk]])
    else:
        tx.conn.execute(_SQLITE_CURSOR, [{"c_id": jid, "c_t": t, "c_skipped": n}
                                         for jid, (t, n) in items])


def update_runs(tx: Tx, updates: list[RunUpdate], node_id: str | None,
                want_successes: bool) -> list[SucceededRun]:
    """Write ``updates`` (one per run, no ``extra``), fenced on ``node_id``
    when given; with ``want_successes``, the runs now succeeded whose job
    others depend on."""
    if tx.dialect == POSTGRESQL:
        return _pg_update_runs(tx, updates, node_id, want_successes)
    if node_id is None:
        tx.conn.execute(_SQLITE_UPDATE, [_sqlite_update_params(u) for u in updates])
    else:
        tx.conn.execute(_SQLITE_UPDATE_FENCED,
                        [{**_sqlite_update_params(u), "u_node_id": node_id} for u in updates])
    return _sqlite_upstream_successes(tx, updates) if want_successes else []


def _pg_update_statement(successes: bool, fenced: bool) -> tuple[str, str, tuple[str, ...]]:
    """(name, text, parameter types) of the prepared update: returning the
    upstream successes or not, fenced on a node or not."""
    arrays = ", ".join(f"${i}" for i in range(1, len(UPDATE_COLUMNS) + 1))
    fence = f"\n  AND t.node_id = ${len(UPDATE_COLUMNS) + 1}" if fenced else ""
    sql = (_PG_UPDATE_SUCCEEDED_SQL if successes else _PG_UPDATE_SQL).format(
        arrays=arrays, columns=", ".join(UPDATE_COLUMNS), fence=fence)
    name = "cronman_update_runs" + ("_successes" if successes else "") + ("_fenced" if fenced else "")
    return name, sql, _PG_UPDATE_TYPES + (("text",) if fenced else ())


_PG_UPDATE_STATEMENTS = {(successes, fenced): _pg_update_statement(successes, fenced)
                         for successes in (False, True) for fenced in (False, True)}


def _pg_update_runs(tx: Tx, updates: list[RunUpdate], node_id: str | None,
                    want_successes: bool) -> list[SucceededRun]:
    updates.sort(key=lambda u: (u.scheduled_for, u.id))
    found: list[SucceededRun] = []
    with key_lookups(tx):
        for chunk in chunks(updates):
            found += _pg_update_chunk(tx, chunk, node_id, want_successes)
    return found


def _pg_update_chunk(tx: Tx, chunk: Sequence[RunUpdate], node_id: str | None,
                     want_successes: bool) -> list[SucceededRun]:
    args: list[Any] = [
        [u.id for u in chunk], [u.scheduled_for for u in chunk], [u.status for u in chunk],
        [u.attempt for u in chunk], [u.started_at for u in chunk],
        [u.finished_at for u in chunk], [u.lateness_ms for u in chunk],
        [u.duration_ms for u in chunk],
        [None if u.result is None else _json_text(u.result) for u in chunk],
        [u.error for u in chunk], [u.lease_expires_at for u in chunk],
        [u.next_attempt_at for u in chunk],
        [None if u.gate is None else _json_text(u.gate) for u in chunk]]
    if node_id is not None:
        args.append(node_id)
    successes = want_successes and any(u.status == "succeeded" for u in chunk)
    name, sql, types = _PG_UPDATE_STATEMENTS[(successes, node_id is not None)]
    result = execute_prepared(tx.conn, name, sql, types, args)
    if successes:
        return [SucceededRun._make(row) for row in result]
    return []


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
    (read back after the executemany, in its transaction). A run whose
    update the fence refused but that is succeeded anyway comes back too:
    its trigger event is already recorded, so nothing is made twice."""
    ids = [u.id for u in updates if u.status == "succeeded"]
    found: list[SucceededRun] = []
    for chunk in chunks(ids, 500):
        stmt = (select(sj.c.id, sj.c.job_id, sj.c.scheduled_for, sj.c.attempt)
                .where(sj.c.id.in_(list(chunk)), sj.c.status == "succeeded",
                       sj.c.job_id.in_(select(job_edges.c.upstream_id))))
        found += [SucceededRun(*row) for row in tx.conn.execute(stmt)]
    return found


def last_runs(conn: Connection, job_ids: list[str]) -> dict[str, Run]:
    """The newest run of each of ``job_ids`` (distinct) that has one."""
    found: dict[str, Run] = {}
    if conn.dialect.name == POSTGRESQL:
        # Recent partitions first (see recent_runs_start), then the rest for
        # the jobs without a recent run.
        since = recent_runs_start(POSTGRESQL, utcnow())
        for stmt, params in ((_PG_LAST_RUNS_SINCE, {"since": since}), (_PG_LAST_RUNS, {})):
            missing = [i for i in job_ids if i not in found]
            for chunk in chunks(missing):
                for row in conn.execute(stmt, {"ids": list(chunk), **params}):
                    run = run_from_row(row)
                    found[run.job_id] = run
        return found
    for jid in job_ids:
        last = conn.execute(_SQLITE_LAST_RUN, {"jid": jid}).first()
        if last is not None:
            found[jid] = run_from_row(last)
    return found
