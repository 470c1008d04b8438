"""JobStore on SQLAlchemy Core, for PostgreSQL and SQLite.

Every write bumps the job's ``change_seq`` (see ``cronman.store.change_seq``
for why a poller's watermark never skips one); where the two databases need
different statements, ``job_bulk`` and ``dialect`` hold them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import and_, delete, func, select, update
from sqlalchemy import exc as sa_exc

from cronman.errors import Conflict, NotFound
from cronman.ids import new_job_id
from cronman.models import Job, JobFilter, JobRow, Page
from cronman.store import dag, history, job_bulk
from cronman.store.change_seq import next_change_seqs, settle_writers
from cronman.store.codec import (
    JOB_FIELDS,
    decode_job_cursor,
    encode_job_cursor,
    job_from_row,
)
from cronman.store.engine import Database, Tx
from cronman.store.job_search import JobQueries
from cronman.store.limits import hold_max_jobs
from cronman.store.records import ChangeContext
from cronman.store.tables import jobs
from cronman.timeutil import utcnow

REQUIRED_SPEC_FIELDS = ("namespace", "name", "schedule", "target", "retry", "misfire",
                        "delivery", "concurrency")
SPEC_DEFAULTS: dict[str, Any] = {
    "priority": 0, "start_at": None, "end_at": None, "jitter": None, "paused": False,
    "labels": None, "dead_letter": None, "last_fire_at": None, "skipped_pending": 0,
    "notify": None, "depends_on": None, "calendars": None,
    "buffer_limit": None, "pause_after_failures": None, "max_runs": None,
}
# What the store keeps for a job's policies (cronman.store.run_policies), as a new job has it.
STATE_DEFAULTS: dict[str, Any] = {
    "failure_streak": 0, "runs_done": 0, "done_at": None, "pause_reason": None,
    "pause_note": None, "paused_at": None,
}
# Changes after which a job's edges in the job graph are looked at again.
GRAPH_FIELDS = frozenset({"depends_on", "schedule"})
# What update_job may change; the rest is the store's bookkeeping.
MUTABLE_FIELDS = frozenset(JOB_FIELDS) - {"id", "version", "created_at", "updated_at",
                                          "deleted_at", "change_seq"}
_COUNT_LIVE = select(func.count()).select_from(jobs).where(jobs.c.deleted_at.is_(None))


def name_field(index: int, count: int) -> str:
    return "name" if count == 1 else f"jobs[{index}].name"


def _stale(current: int, expected: int | None) -> Conflict:
    return Conflict(f"the job is at version {current}, not {expected}: it changed since "
                    "it was read", field="version")


def _name_conflict(namespace: str, name: str, index: int, count: int) -> Conflict:
    return Conflict(f"a job named {name!r} already exists in namespace {namespace!r}",
                    field=name_field(index, count))


def _first_taken(rows: list[dict[str, Any]], seen: dict[tuple[str, str], int],
                 taken: set[tuple[str, str]]) -> Conflict:
    """The conflict naming the first of ``rows`` whose name is taken."""
    i = min(seen[k] for k in taken)
    return _name_conflict(rows[i]["namespace"], rows[i]["name"], i, len(rows))


class SqlJobStore(JobQueries):
    """Jobs and their change log (``change_seq``)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    # -- writes ------------------------------------------------------------

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

        adding = Counter(row["namespace"] for row in rows)

        def fn(tx: Tx) -> None:
            hold_max_jobs(tx, adding)
            taken = job_bulk.insert_jobs(tx, rows)
            if taken:
                raise _first_taken(rows, seen, taken)
            dag.record_created(tx, rows)
            history.created(tx, change, rows)
            tx.announce([r["id"] for r in rows])

        try:
            self._db.write(fn)
        except sa_exc.IntegrityError:
            # A name is taken (PostgreSQL: found by the unique index alone), or a
            # concurrent create took it between our check and insert (SQLite).
            with self._db.read() as conn:
                taken = job_bulk.taken_names(conn, list(seen))
            if taken:
                raise _first_taken(rows, seen, taken) from None
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
                raise NotFound(f"no job with id {job_id!r}")
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
            (seq,) = next_change_seqs(tx, 1)
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
                    raise NotFound(f"no job with id {job_id!r}")
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
            (seq,) = next_change_seqs(tx, 1)
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

        The tombstone holding the largest change_seq is kept (see
        ``cronman.store.change_seq``).
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
        conds = self._filter_conditions(flt)
        if cursor:
            conds.append(jobs.c.id > decode_job_cursor(cursor))
        stmt = select(jobs).where(and_(*conds)).order_by(jobs.c.id).limit(limit + 1)
        with self._db.read() as conn:
            rows = conn.execute(stmt).all()
        items = [job_from_row(r) for r in rows[:limit]]
        next_cursor = encode_job_cursor(items[-1].id) if len(rows) > limit and items else None
        return Page(items, next_cursor)

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
        return job_bulk.iter_live_job_rows(self._db, batch_size)

    def live_job_rows(self, job_ids: Sequence[str]) -> list[JobRow]:
        """The live ones of ``job_ids`` as lean rows (see ``iter_live_job_rows``);
        deleted and unknown ids are left out."""
        return job_bulk.live_job_rows(self._db, job_ids)

    def live_job_states(self, job_ids: Sequence[str]
                        ) -> dict[str, tuple[int, bool, int | None, int]]:
        """(version, paused, last_fire_at in Unix ms, skipped_pending) of the live
        ones of ``job_ids``: what a node checks before holding jobs it prepared ahead."""
        return job_bulk.live_job_states(self._db, job_ids)

    def jobs_changed_since(self, change_seq: int, limit: int = 10_000) -> list[Job]:
        stmt = (select(jobs).where(jobs.c.change_seq > change_seq)
                .order_by(jobs.c.change_seq).limit(limit))
        with self._db.read() as conn:
            settle_writers(conn)
            return [job_from_row(r) for r in conn.execute(stmt)]

    def current_change_seq(self) -> int:
        """The largest change_seq written so far (0 for none): a node's first
        watermark, read before its initial ``iter_live_jobs`` sync."""
        with self._db.read() as conn:
            settle_writers(conn)
            return int(conn.execute(select(func.coalesce(func.max(jobs.c.change_seq), 0)))
                       .scalar_one())

    def count_live_jobs(self) -> int:
        """How many jobs are live (one indexed count query)."""
        with self._db.read() as conn:
            return int(conn.execute(_COUNT_LIVE).scalar_one())


def _row_from_spec(spec: dict[str, Any], now: datetime, new_ids: Iterator[str]
                   ) -> dict[str, Any]:
    missing = [name for name in REQUIRED_SPEC_FIELDS if name not in spec]
    if missing:
        raise ValueError(f"job spec lacks {missing}")
    unknown = (set(spec) - set(REQUIRED_SPEC_FIELDS) - set(SPEC_DEFAULTS) - set(STATE_DEFAULTS)
               - {"id"})
    if unknown:
        raise ValueError(f"job spec has unknown fields {sorted(unknown)}")
    row: dict[str, Any] = {**SPEC_DEFAULTS, **STATE_DEFAULTS, **spec}
    row["id"] = spec.get("id") or next(new_ids)
    row["labels"] = dict(row["labels"] or {})
    row["paused"] = bool(row["paused"])
    if row["paused"] and row["paused_at"] is None:
        row["paused_at"] = now
    row.update(version=1, created_at=now, updated_at=now, deleted_at=None, change_seq=0)
    return row
