"""The job store's batch statements, where PostgreSQL and SQLite differ most.

PostgreSQL gets one statement per batch and reads the driver's plain tuples
(see ``cronman.store.pgsql``); SQLite, in this process, gets plain
SQLAlchemy statements. Lean rows (``JobRow``) carry the JSON columns as
their JSON text: no per-row decoding, callers decode each distinct text once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Text, insert, select, type_coerce
from sqlalchemy.engine import Connection

from cronman.models import JobRow
from cronman.store.change_seq import WRITER_LOCK_SQL, next_change_seqs
from cronman.store.dialect import POSTGRESQL
from cronman.store.engine import Database, Tx
from cronman.store.pgsql import fetch_rendered, fetch_tuples, render_values, stream_tuples
from cronman.store.tables import jobs
from cronman.timeutil import to_ms

# The PostgreSQL job INSERT: the writer lock, then the rows of one JSON array
# (one round trip, one json.dumps), change_seq drawn in array order. JSON null
# in a JSON column stays JSON null, as SQLAlchemy's JSON type stores None.
_PG_JSON_COLUMNS = frozenset({"schedule", "target", "retry", "misfire", "labels",
                              "dead_letter"})
_PG_COLUMNS = tuple(c.name for c in jobs.c)
_PG_INSERT = "{lock}; INSERT INTO jobs ({cols}) SELECT {exprs} FROM jsonb_populate_recordset(" \
    "NULL::jobs, %s::jsonb) AS r RETURNING id, change_seq".format(
        lock=WRITER_LOCK_SQL, cols=", ".join(_PG_COLUMNS),
        exprs=", ".join("nextval('jobs_change_seq')" if name == "change_seq"
                        else f"COALESCE(r.{name}, 'null'::jsonb)" if name in _PG_JSON_COLUMNS
                        else f"r.{name}" for name in _PG_COLUMNS))

# The columns of a lean row, in order.
LIVE_ROW_COLUMNS = JobRow._fields
_JSON_ROW_COLUMNS = frozenset({"schedule", "target", "retry", "misfire", "dead_letter",
                               "depends_on", "calendars"})
_PG_LIVE_COLUMNS = ", ".join(f"{name}::text" if name in _JSON_ROW_COLUMNS else name
                             for name in LIVE_ROW_COLUMNS)
_PG_LIVE_ROWS = f"SELECT {_PG_LIVE_COLUMNS} FROM jobs WHERE deleted_at IS NULL"
_PG_LIVE_STATES_IN = ("SELECT id, version, paused, "
                      "(extract(epoch FROM last_fire_at) * 1000)::bigint, skipped_pending "
                      "FROM jobs WHERE deleted_at IS NULL "
                      "AND id IN (SELECT unnest(%(ids)s::text[]))")
# unnest: a hash join; "= ANY(array)" makes PostgreSQL scan the table and
# search the array for every row.
_PG_LIVE_ROWS_IN = (f"SELECT {_PG_LIVE_COLUMNS} FROM jobs WHERE deleted_at IS NULL "
                    "AND id IN (SELECT unnest(%(ids)s::text[]))")
_SQLITE_LEAN_COLUMNS = [type_coerce(jobs.c[name], Text) if name in _JSON_ROW_COLUMNS
                        else jobs.c[name] for name in LIVE_ROW_COLUMNS]
_SQLITE_STATE_COLUMNS = [jobs.c.id, jobs.c.version, jobs.c.paused, jobs.c.last_fire_at,
                         jobs.c.skipped_pending]
_NAME_CHECK_CHUNK = 500

JobState = tuple[int, bool, int | None, int]


def insert_jobs(tx: Tx, rows: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """Insert new job rows and set each row's change_seq, or, when live jobs
    hold some of their (namespace, name) pairs, insert nothing and return those.

    PostgreSQL leaves names to the unique index (a taken one raises
    ``IntegrityError``) and always returns an empty set; SQLite checks first.
    """
    if tx.dialect == POSTGRESQL:
        _pg_insert(tx.conn, rows)
        return set()
    taken = taken_names(tx.conn, [(r["namespace"], r["name"]) for r in rows])
    if taken:
        return taken
    for row, seq in zip(rows, next_change_seqs(tx, len(rows)), strict=True):
        row["change_seq"] = seq
    tx.conn.execute(insert(jobs), rows)
    return set()


def _pg_insert(conn: Connection, rows: list[dict[str, Any]]) -> None:
    payload = json.dumps(rows, default=_json_time, separators=(",", ":"))
    seqs = dict(fetch_rendered(conn, render_values(conn, _PG_INSERT, [(payload,)])))
    for row in rows:
        row["change_seq"] = seqs[row["id"]]


def _json_time(value: Any) -> str:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the store")
        return value.astimezone(UTC).isoformat()
    raise TypeError(f"cannot store {type(value).__name__} in a job row")


def taken_names(conn: Connection, keys: list[tuple[str, str]]) -> set[tuple[str, str]]:
    """Which of the (namespace, name) pairs a live job already holds."""
    wanted = set(keys)
    taken: set[tuple[str, str]] = set()
    namespaces = sorted({ns for ns, _ in keys})
    names = sorted({name for _, name in keys})
    for start in range(0, len(names), _NAME_CHECK_CHUNK):
        stmt = select(jobs.c.namespace, jobs.c.name).where(
            jobs.c.deleted_at.is_(None),
            jobs.c.namespace.in_(namespaces),
            jobs.c.name.in_(names[start:start + _NAME_CHECK_CHUNK]),
        )
        taken.update((ns, name) for ns, name in conn.execute(stmt) if (ns, name) in wanted)
    return taken


def iter_live_job_rows(db: Database, batch_size: int) -> Iterator[list[JobRow]]:
    """Live jobs as lean rows, in batches of ``batch_size``."""
    if db.dialect == POSTGRESQL:
        # One sequential scan, whatever the planner knows: keyset pages
        # ("id > last ORDER BY id LIMIT n") turn into a full scan and sort
        # per page on a freshly loaded table whose statistics are missing.
        with db.read() as conn:
            for rows in stream_tuples(conn, _PG_LIVE_ROWS, batch_size):
                yield list(map(JobRow._make, rows))
        return
    after = ""
    while True:
        with db.read() as conn:
            batch = [JobRow._make(r) for r in conn.execute(
                select(*_SQLITE_LEAN_COLUMNS)
                .where(jobs.c.deleted_at.is_(None), jobs.c.id > after)
                .order_by(jobs.c.id).limit(batch_size))]
        if not batch:
            return
        yield batch
        if len(batch) < batch_size:
            return
        after = batch[-1].id


def live_job_rows(db: Database, job_ids: Sequence[str]) -> list[JobRow]:
    """The live ones of ``job_ids`` as lean rows."""
    return list(map(JobRow._make,
                    _live_by_ids(db, job_ids, _PG_LIVE_ROWS_IN, _SQLITE_LEAN_COLUMNS)))


def live_job_states(db: Database, job_ids: Sequence[str]) -> dict[str, JobState]:
    """(version, paused, last_fire_at in Unix ms, skipped_pending) of the live
    ones of ``job_ids``."""
    rows = _live_by_ids(db, job_ids, _PG_LIVE_STATES_IN, _SQLITE_STATE_COLUMNS)
    # PostgreSQL computes the cursor's milliseconds itself; SQLite gives a datetime.
    return {job_id: (version, bool(paused),
                     last if last is None or isinstance(last, int) else to_ms(last), skipped)
            for job_id, version, paused, last, skipped in rows}


def _live_by_ids(db: Database, job_ids: Sequence[str], pg_sql: str,
                 columns: list[Any]) -> list[tuple[Any, ...]]:
    """``columns`` of the live ones of ``job_ids``, in chunks: on PostgreSQL
    ``pg_sql`` (an ``%(ids)s`` array statement) read as driver tuples."""
    ids = list(dict.fromkeys(job_ids))
    found: list[tuple[Any, ...]] = []
    with db.read() as conn:
        if db.dialect == POSTGRESQL:
            for start in range(0, len(ids), 10_000):
                found.extend(fetch_tuples(conn, pg_sql, {"ids": ids[start:start + 10_000]}))
        else:
            for start in range(0, len(ids), 500):
                found.extend(tuple(r) for r in conn.execute(
                    select(*columns).where(jobs.c.deleted_at.is_(None),
                                           jobs.c.id.in_(ids[start:start + 500]))))
    return found
