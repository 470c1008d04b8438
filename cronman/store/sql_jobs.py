"""JobStore on SQLAlchemy Core, for PostgreSQL and SQLite.

``change_seq`` ordering: a poller uses the largest change_seq it has seen as
its watermark, so it must never see a change_seq while a smaller one can
still commit (a plain sequence could commit 11 before 10, and a poller at
watermark 11 would never see 10). On PostgreSQL every write that bumps
``change_seq`` first takes one cluster-wide transaction-level advisory lock
in *shared* mode and only then draws from the ``jobs_change_seq`` sequence;
the lock is released after its commit is visible. The watermark reads
(``jobs_changed_since``, ``current_change_seq``) take the same lock in
*exclusive* mode before their SELECT: that waits until every writer that
may hold a drawn value has committed or rolled back (and holds new writers
off until the read's snapshot is taken), so every change_seq up to the
largest the read sees is final. Writers do not wait for one another (their
commits overlap); the scheduler's cursor updates (``claim_runs``) do not
bump change_seq and take no such lock.
On SQLite, change_seq is max + 1 inside a ``BEGIN IMMEDIATE`` transaction.
``purge_tombstones`` never removes the row holding the largest change_seq,
so max + 1 never reuses a value a poller has already seen.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    Text,
    and_,
    delete,
    exists,
    func,
    insert,
    select,
    text,
    type_coerce,
    update,
)
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement

from cronman.errors import Conflict, NotFound
from cronman.ids import new_job_id
from cronman.models import Job, JobFilter, JobRow, Page
from cronman.store import dag, history
from cronman.store.codec import (
    JOB_FIELDS,
    decode_job_cursor,
    encode_job_cursor,
    job_from_row,
)
from cronman.store.engine import Database, Tx
from cronman.store.history import ChangeContext
from cronman.store.job_search import JobQueries, name_prefix_condition
from cronman.store.pgsql import fetch_rendered, fetch_tuples, render_values, stream_tuples
from cronman.store.tables import jobs
from cronman.timeutil import to_ms, utcnow

# Advisory lock key guarding change_seq allocation ("cmjobs"): writers shared,
# watermark readers exclusive (see module doc).
CHANGE_SEQ_LOCK_KEY = 0x636D_6A6F_6273
_WRITER_LOCK = f"SELECT pg_advisory_xact_lock_shared({CHANGE_SEQ_LOCK_KEY})"
_READER_LOCK = text(f"SELECT pg_advisory_xact_lock({CHANGE_SEQ_LOCK_KEY})")
# The PostgreSQL job INSERT: the writer lock, then the rows of one JSON array
# (one round trip, one json.dumps), change_seq drawn in array order. JSON null
# in a JSON column stays JSON null, as SQLAlchemy's JSON type stores None.
_PG_JSON_COLUMNS = frozenset({"schedule", "target", "retry", "misfire", "labels",
                              "dead_letter"})
_PG_COLUMNS = tuple(c.name for c in jobs.c)
_PG_INSERT = "{lock}; INSERT INTO jobs ({cols}) SELECT {exprs} FROM jsonb_populate_recordset(" \
    "NULL::jobs, %s::jsonb) AS r RETURNING id, change_seq".format(
        lock=_WRITER_LOCK, cols=", ".join(_PG_COLUMNS),
        exprs=", ".join("nextval('jobs_change_seq')" if name == "change_seq"
                        else f"COALESCE(r.{name}, 'null'::jsonb)" if name in _PG_JSON_COLUMNS
                        else f"r.{name}" for name in _PG_COLUMNS))

# The columns of ``iter_live_job_rows``, in order.
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

REQUIRED_SPEC_FIELDS = ("namespace", "name", "schedule", "target", "retry", "misfire",
                        "delivery", "concurrency")
SPEC_DEFAULTS: dict[str, Any] = {
    "priority": 0, "start_at": None, "end_at": None, "jitter": None, "paused": False,
    "labels": None, "dead_letter": None, "last_fire_at": None, "skipped_pending": 0,
    "notify": None, "depends_on": None, "calendars": None,
}
# Changes after which a job's edges in the job graph are looked at again.
GRAPH_FIELDS = frozenset({"depends_on", "schedule"})
# What update_job may change; the rest is the store's bookkeeping.
MUTABLE_FIELDS = frozenset(JOB_FIELDS) - {"id", "version", "created_at", "updated_at",
                                          "deleted_at", "change_seq"}
_NAME_CHECK_CHUNK = 500
_COUNT_LIVE = select(func.count()).select_from(jobs).where(jobs.c.deleted_at.is_(None))


def name_field(index: int, count: int) -> str:
    return "name" if count == 1 else f"jobs[{index}].name"


def _stale(current: int, expected: int | None) -> Conflict:
    return Conflict(f"the job is at version {current}, not {expected}: it changed since "
                    "it was read", field="version")


def _name_conflict(namespace: str, name: str, index: int, count: int) -> Conflict:
    return Conflict(f"a job named {name!r} already exists in namespace {namespace!r}",
                    field=name_field(index, count))


class SqlJobStore(JobQueries):
    """Jobs and their change log (``change_seq``)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    # -- writes ------------------------------------------------------------

    def _next_seqs(self, tx: Tx, n: int) -> list[int]:
        conn = tx.conn
        if tx.dialect == "postgresql":
            conn.exec_driver_sql(_WRITER_LOCK)
            rows = conn.execute(
                text("SELECT nextval('jobs_change_seq') FROM generate_series(1, :n)"), {"n": n}
            ).scalars().all()
            return sorted(rows)
        top = conn.execute(select(func.coalesce(func.max(jobs.c.change_seq), 0))).scalar_one()
        return list(range(top + 1, top + n + 1))

    def create_jobs(self, specs: Sequence[dict[str, Any]],
                    change: ChangeContext | None = None) -> list[Job]:
        if not specs:
            return []
        now = utcnow()
        count = len(specs)
        rows: list[dict[str, Any]] = []
        seen: dict[tuple[str, str], int] = {}
        # Ids made in one millisecond are not ordered by their random tail:
        # sort them so that a batch lists in the order it was given.
        missing = sum(1 for spec in specs if not spec.get("id"))
        fresh = iter(sorted(new_job_id() for _ in range(missing)))
        for i, spec in enumerate(specs):
            row = _row_from_spec(spec, now, fresh)
            key = (row["namespace"], row["name"])
            if key in seen:
                raise _name_conflict(*key, i, count)
            seen[key] = i
            rows.append(row)

        def fn(tx: Tx) -> None:
            if tx.dialect == "postgresql":
                _pg_insert(tx.conn, rows)
                dag.record_created(tx, rows)
                history.created(tx, change, rows)
                tx.announce([r["id"] for r in rows])
                return
            taken = _taken_names(tx.conn, list(seen))
            if taken:
                i = min(seen[k] for k in taken)
                raise _name_conflict(rows[i]["namespace"], rows[i]["name"], i, count)
            for row, seq in zip(rows, self._next_seqs(tx, count), strict=True):
                row["change_seq"] = seq
            tx.conn.execute(insert(jobs), rows)
            dag.record_created(tx, rows)
            history.created(tx, change, rows)
            tx.announce([r["id"] for r in rows])

        try:
            self._db.write(fn)
        except sa_exc.IntegrityError:
            # A name is taken (PostgreSQL: found by the unique index alone), or a
            # concurrent create took it between our check and insert (SQLite).
            with self._db.read() as conn:
                taken = _taken_names(conn, list(seen))
            if taken:
                i = min(seen[k] for k in taken)
                raise _name_conflict(rows[i]["namespace"], rows[i]["name"], i, count) from None
            raise Conflict("a job with this id or name already exists",
                           field=name_field(0, count)) from None
        return [Job(**{name: row[name] for name in JOB_FIELDS}) for row in rows]

    def update_job(self, job_id: str, changes: dict[str, Any], *,
                   expected_version: int | None = None,
                   change: ChangeContext | None = None) -> Job:
        """Write ``changes`` (and only them) to a live job; version + 1.

        With ``expected_version`` the write is conditional on it, in the
        UPDATE itself (``WHERE version = :v``): when another write came first,
        ``Conflict`` (field ``version``) and nothing is written. ``change``
        is recorded in the job's history in the same transaction.
        """
        unknown = set(changes) - MUTABLE_FIELDS
        if unknown:
            raise ValueError(f"update_job cannot change {sorted(unknown)}")
        if not changes:
            job = self.get_job(job_id)
            if job is None:
                raise NotFound(f"no job {job_id}")
            if expected_version is not None and job.version != expected_version:
                raise _stale(job.version, expected_version)
            return job
        values = dict(changes)
        if "labels" in values and values["labels"] is None:
            values["labels"] = {}
        where = [jobs.c.id == job_id, jobs.c.deleted_at.is_(None)]
        if expected_version is not None:
            where.append(jobs.c.version == expected_version)

        def fn(tx: Tx) -> Job:
            before = history.before_change(tx, change, job_id)
            (seq,) = self._next_seqs(tx, 1)
            stmt = (
                update(jobs)
                .where(*where)
                .values(**values, version=jobs.c.version + 1, change_seq=seq,
                        updated_at=utcnow())
                .returning(*jobs.c)
            )
            row = tx.conn.execute(stmt).first()
            if row is None:
                current = tx.conn.execute(
                    select(jobs.c.version).where(jobs.c.id == job_id,
                                                 jobs.c.deleted_at.is_(None))).scalar()
                if current is None:
                    raise NotFound(f"no job {job_id}")
                raise _stale(current, expected_version)
            tx.announce([job_id])
            job = job_from_row(row)
            if GRAPH_FIELDS & values.keys():
                dag.record_changed(tx, job_id, {"depends_on": job.depends_on,
                                                "schedule": job.schedule})
            history.changed(tx, change, before, job)
            return job

        try:
            return self._db.write(fn)
        except sa_exc.IntegrityError:
            raise Conflict(
                f"a job named {changes.get('name')!r} already exists in that namespace",
                field="name",
            ) from None

    def delete_job(self, job_id: str, change: ChangeContext | None = None, *,
                   force: bool = False) -> bool:
        """Tombstone a live job; ``Conflict`` while live jobs depend on it,
        unless ``force`` (see ``cronman.store.dag``)."""

        def fn(tx: Tx) -> bool:
            before = history.before_change(tx, change, job_id)
            (seq,) = self._next_seqs(tx, 1)
            now = utcnow()
            stmt = (
                update(jobs)
                .where(jobs.c.id == job_id, jobs.c.deleted_at.is_(None))
                .values(deleted_at=now, updated_at=now, version=jobs.c.version + 1,
                        change_seq=seq)
            )
            if tx.conn.execute(stmt).rowcount == 0:
                return False
            dag.record_deleted(tx, job_id, force=force)
            history.changed(tx, change, before, None)
            tx.announce([job_id])
            return True

        return self._db.write(fn)

    def purge_tombstones(self, older_than: datetime) -> int:
        """Remove jobs deleted before ``older_than``; returns how many.

        The tombstone holding the largest change_seq is kept (see module doc).
        """
        top = select(func.max(jobs.c.change_seq)).scalar_subquery()
        stmt = delete(jobs).where(jobs.c.deleted_at.is_not(None),
                                  jobs.c.deleted_at < older_than, jobs.c.change_seq < top)
        return self._db.write(lambda tx: tx.conn.execute(stmt).rowcount)

    # -- reads -------------------------------------------------------------

    def get_job(self, job_id: str) -> Job | None:
        stmt = select(jobs).where(jobs.c.id == job_id, jobs.c.deleted_at.is_(None))
        with self._db.read() as conn:
            row = conn.execute(stmt).first()
        return None if row is None else job_from_row(row)

    def get_jobs(self, job_ids: Sequence[str]) -> list[Job]:
        ids = list(dict.fromkeys(job_ids))
        found: list[Job] = []
        with self._db.read() as conn:
            for start in range(0, len(ids), 1000):
                chunk = ids[start:start + 1000]
                rows = conn.execute(select(jobs).where(jobs.c.id.in_(chunk))).all()
                found.extend(job_from_row(r) for r in rows)
        return found

    def list_jobs(self, flt: JobFilter, limit: int, cursor: str | None) -> Page:
        conds: list[ColumnElement[bool]] = [jobs.c.deleted_at.is_(None)]
        if cursor:
            conds.append(jobs.c.id > decode_job_cursor(cursor))
        if flt.namespace is not None:
            conds.append(jobs.c.namespace == flt.namespace)
        if flt.namespaces is not None:
            conds.append(jobs.c.namespace.in_(list(flt.namespaces)))
        if flt.paused is not None:
            conds.append(jobs.c.paused == flt.paused)
        if flt.name_prefix:
            conds.append(name_prefix_condition(self._db, flt.name_prefix))
        if flt.labels:
            conds.extend(self._label_conditions(flt.labels))
        stmt = select(jobs).where(and_(*conds)).order_by(jobs.c.id).limit(limit + 1)
        with self._db.read() as conn:
            rows = conn.execute(stmt).all()
        items = [job_from_row(r) for r in rows[:limit]]
        next_cursor = encode_job_cursor(items[-1].id) if len(rows) > limit and items else None
        return Page(items, next_cursor)

    def _label_conditions(self, labels: Sequence[tuple[str, str]]) -> list[ColumnElement[bool]]:
        if self._db.is_postgres:
            wanted: dict[str, str] = {}
            for key, value in labels:
                if wanted.setdefault(key, value) != value:
                    return [jobs.c.id.is_(None)]  # one key, two values: nothing matches
            return [type_coerce(jobs.c.labels, JSONB).contains(wanted)]
        conds: list[ColumnElement[bool]] = []
        for key, value in labels:
            each = func.json_each(jobs.c.labels).table_valued("key", "value")
            conds.append(exists(select(1).select_from(each)
                                .where(each.c.key == key, each.c.value == value)))
        return conds

    def iter_live_jobs(self, batch_size: int = 10_000) -> Iterator[list[Job]]:
        after = ""
        while True:
            stmt = (select(jobs).where(jobs.c.deleted_at.is_(None), jobs.c.id > after)
                    .order_by(jobs.c.id).limit(batch_size))
            with self._db.read() as conn:
                batch = [job_from_row(r) for r in conn.execute(stmt)]
            if not batch:
                return
            yield batch
            if len(batch) < batch_size:
                return
            after = batch[-1].id

    def iter_live_job_rows(self, batch_size: int = 10_000) -> Iterator[list[JobRow]]:
        """Live jobs in batches as lean rows for a scheduler's initial load
        (the JSON columns as their JSON text: no per-row decoding; callers
        decode each distinct text once)."""
        if self._db.is_postgres:
            # One sequential scan, whatever the planner knows: keyset pages
            # ("id > last ORDER BY id LIMIT n") turn into a full scan and sort
            # per page on a freshly loaded table whose statistics are missing.
            with self._db.read() as conn:
                for rows in stream_tuples(conn, _PG_LIVE_ROWS, batch_size):
                    yield list(map(JobRow._make, rows))
            return
        after = ""
        while True:
            with self._db.read() as conn:
                batch = [JobRow._make(r) for r in conn.execute(
                    select(*self._lean_columns())
                    .where(jobs.c.deleted_at.is_(None), jobs.c.id > after)
                    .order_by(jobs.c.id).limit(batch_size))]
            if not batch:
                return
            yield batch
            if len(batch) < batch_size:
                return
            after = batch[-1].id

    def live_job_rows(self, job_ids: Sequence[str]) -> list[JobRow]:
        """The live ones of ``job_ids`` as lean rows (see ``iter_live_job_rows``);
        deleted and unknown ids are left out."""
        return list(map(JobRow._make,
                        self._live_by_ids(job_ids, _PG_LIVE_ROWS_IN, self._lean_columns())))

    def live_job_states(self, job_ids: Sequence[str]
                        ) -> dict[str, tuple[int, bool, int | None, int]]:
        """(version, paused, last_fire_at in Unix ms, skipped_pending) of the live
        ones of ``job_ids``: what a node checks before holding jobs it prepared ahead."""
        rows = self._live_by_ids(job_ids, _PG_LIVE_STATES_IN,
                                 [jobs.c.id, jobs.c.version, jobs.c.paused,
                                  jobs.c.last_fire_at, jobs.c.skipped_pending])
        # PostgreSQL computes the cursor's milliseconds itself; SQLite gives a datetime.
        return {job_id: (version, bool(paused),
                         last if last is None or isinstance(last, int) else to_ms(last), skipped)
                for job_id, version, paused, last, skipped in rows}

    def _live_by_ids(self, job_ids: Sequence[str], pg_sql: str,
                     columns: list[Any]) -> list[tuple[Any, ...]]:
        """``columns`` of the live ones of ``job_ids``, in chunks: on PostgreSQL
        ``pg_sql`` (an ``%(ids)s`` array statement) read as driver tuples."""
        ids = list(dict.fromkeys(job_ids))
        found: list[tuple[Any, ...]] = []
        chunk = 10_000 if self._db.is_postgres else 500
        with self._db.read() as conn:
            for start in range(0, len(ids), chunk):
                part = ids[start:start + chunk]
                if self._db.is_postgres:
                    found.extend(fetch_tuples(conn, pg_sql, {"ids": part}))
                else:
                    found.extend(tuple(r) for r in conn.execute(
                        select(*columns).where(jobs.c.deleted_at.is_(None),
                                               jobs.c.id.in_(part))))
        return found

    @staticmethod
    def _lean_columns() -> list[Any]:
        return [type_coerce(jobs.c[name], Text) if name in _JSON_ROW_COLUMNS else jobs.c[name]
                for name in LIVE_ROW_COLUMNS]

    def jobs_changed_since(self, change_seq: int, limit: int = 10_000) -> list[Job]:
        stmt = (select(jobs).where(jobs.c.change_seq > change_seq)
                .order_by(jobs.c.change_seq).limit(limit))
        with self._db.read() as conn:
            self._settle_writers(conn)
            return [job_from_row(r) for r in conn.execute(stmt)]

    def current_change_seq(self) -> int:
        """The largest change_seq written so far (0 for none): a node's first
        watermark, read before its initial ``iter_live_jobs`` sync."""
        with self._db.read() as conn:
            self._settle_writers(conn)
            return int(conn.execute(select(func.coalesce(func.max(jobs.c.change_seq), 0)))
                       .scalar_one())

    def count_live_jobs(self) -> int:
        """How many jobs are live (one indexed count query)."""
        with self._db.read() as conn:
            return int(conn.execute(_COUNT_LIVE).scalar_one())

    def _settle_writers(self, conn: Connection) -> None:
        """Before a watermark read: wait out the writers holding drawn change_seqs."""
        if self._db.is_postgres:
            conn.execute(_READER_LOCK)


def _row_from_spec(spec: dict[str, Any], now: datetime, new_ids: Iterator[str]
                   ) -> dict[str, Any]:
    missing = [name for name in REQUIRED_SPEC_FIELDS if name not in spec]
    if missing:
        raise ValueError(f"job spec lacks {missing}")
    unknown = set(spec) - set(REQUIRED_SPEC_FIELDS) - set(SPEC_DEFAULTS) - {"id"}
    if unknown:
        raise ValueError(f"job spec has unknown fields {sorted(unknown)}")
    row: dict[str, Any] = {**SPEC_DEFAULTS, **spec}
    row["id"] = spec.get("id") or next(new_ids)
    row["labels"] = dict(row["labels"] or {})
    row["paused"] = bool(row["paused"])
    row.update(version=1, created_at=now, updated_at=now, deleted_at=None, change_seq=0)
    return row


def _json_time(value: Any) -> str:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the store")
        return value.astimezone(UTC).isoformat()
    raise TypeError(f"cannot store {type(value).__name__} in a job row")


def _pg_insert(conn: Connection, rows: list[dict[str, Any]]) -> None:
    """Insert ``rows`` (one statement after the writer lock); sets their change_seq."""
    payload = json.dumps(rows, default=_json_time, separators=(",", ":"))
    got = fetch_rendered(conn, render_values(conn, _PG_INSERT, [(payload,)]))
    seqs = dict(got)
    for row in rows:
        row["change_seq"] = seqs[row["id"]]


def _taken_names(conn: Connection, keys: list[tuple[str, str]]) -> set[tuple[str, str]]:
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
