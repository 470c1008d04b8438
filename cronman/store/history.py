"""Job history: who changed which job, when, through which request, and how.

Every job change made through the API (create, update, patch, pause, resume,
trigger, replay, backfill, delete) writes one ``job_history`` row *in the
transaction of the change*: the change and its record commit together or not
at all. The job write paths of the store take an optional ``ChangeContext``
(the API always gives one) and make one or two calls here:

- ``before_change`` locks the job row (``SELECT ... FOR UPDATE`` on
  PostgreSQL; SQLite writers already hold the database's write lock) and
  reads the definition as it stands, so ``before`` is exactly what the
  change replaced even when two writers race;
- ``created``, ``changed`` and ``requested`` insert the row.

Without a context (benchmarks and tests loading jobs straight into the
store) nothing is recorded here; the change data capture of the jobs table
(``cronman audit export``) still sees those writes.

Definitions are stored as the API shows them, secrets redacted: the context
carries the API's own rendering (``ChangeContext.describe``), so the store
never holds a second notion of what a secret is.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import insert, select

from cronman.errors import ValidationError
from cronman.models import Job, Page
from cronman.store.codec import JOB_FIELDS, job_from_row
from cronman.store.dialect import for_update
from cronman.store.engine import Database, Tx
from cronman.store.records import ChangeContext
from cronman.store.tables import job_history, jobs
from cronman.timeutil import format_rfc3339, utcnow
from cronman.vocabulary import JobAction


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One recorded change of a job."""

    id: int
    job_id: str
    namespace: str
    job_name: str
    action: str
    job_version: int
    actor_token_id: str | None
    actor_name: str
    request_id: str | None
    at: datetime
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    details: dict[str, Any] | None

    def to_json(self) -> dict[str, Any]:
        """The entry as API JSON (``changed``: the top-level keys that differ)."""
        before, after = self.before or {}, self.after or {}
        changed = sorted(k for k in set(before) | set(after)
                         if k not in _BOOKKEEPING and before.get(k) != after.get(k))
        return {
            "id": str(self.id),
            "job_id": self.job_id,
            "namespace": self.namespace,
            "job_name": self.job_name,
            "action": self.action,
            "job_version": self.job_version,
            "actor": {"token_id": self.actor_token_id, "name": self.actor_name},
            "request_id": self.request_id,
            "at": format_rfc3339(self.at),
            "changed": changed,
            "before": self.before,
            "after": self.after,
            "details": self.details,
        }


# Keys of a rendered definition that every write moves; not a change of the definition.
_BOOKKEEPING = frozenset({"version", "updated_at", "next_fire_at"})


# -- writing (inside the store's write transactions) --------------------------

def before_change(tx: Tx, change: ChangeContext | None, job_id: str) -> Job | None:
    """The live job ``job_id`` as it stands, its row locked until the commit
    (None without a context: nothing is recorded, nothing locked)."""
    if change is None:
        return None
    stmt = for_update(select(jobs).where(jobs.c.id == job_id, jobs.c.deleted_at.is_(None)),
                      tx.dialect)
    row = tx.conn.execute(stmt).first()
    return None if row is None else job_from_row(row)


def created(tx: Tx, change: ChangeContext | None, rows: Iterable[Mapping[str, Any]]) -> None:
    """Record the creation of the jobs inserted as ``rows`` (full job rows)."""
    if change is None:
        return
    made = [Job(**{name: row[name] for name in JOB_FIELDS}) for row in rows]
    _insert(tx, [_entry(change, job, None, job) for job in made])


def changed(tx: Tx, change: ChangeContext | None, before: Job | None,
            after: Job | None) -> None:
    """Record an update (``after`` the job as written) or a delete (``after`` None)."""
    if change is None or before is None:
        return
    _insert(tx, [_entry(change, before, before, after)])


def requested(tx: Tx, change: ChangeContext | None, job_id: str,
              details: Mapping[str, Any]) -> None:
    """Record a run request (trigger, replay, backfill) of ``job_id``: the
    definition it fires, read in the request's transaction, and ``details``."""
    if change is None:
        return
    row = tx.conn.execute(select(jobs).where(jobs.c.id == job_id)).first()
    if row is None:
        return
    job = job_from_row(row)
    _insert(tx, [_entry(change, job, job, job, details)])


def recorded(tx: Tx, *, job_id: str, namespace: str, name: str, version: int,
             action: JobAction, actor: str, details: Mapping[str, Any]) -> None:
    """Record a change the service made itself (no request, no token): a job
    its breaker paused, a job that reached its ``max_runs``. No definitions
    are kept (the definition did not change); ``details`` say why."""
    _insert(tx, [{
        "job_id": job_id, "namespace": namespace, "job_name": name, "action": action.value,
        "job_version": version, "actor_token_id": None, "actor_name": actor,
        "request_id": None, "at": utcnow(), "before": None, "after": None,
        "details": dict(details),
    }])


def _entry(change: ChangeContext, job: Job, before: Job | None, after: Job | None,
           details: Mapping[str, Any] | None = None) -> dict[str, Any]:
    version = after.version if after is not None else job.version + 1
    merged = {**change.details, **(details or {})}
    return {
        "job_id": job.id,
        "namespace": (after or job).namespace,
        "job_name": (after or job).name,
        "action": change.action.value,
        "job_version": version,
        "actor_token_id": change.actor_token_id,
        "actor_name": change.actor_name,
        "request_id": change.request_id,
        "at": utcnow(),
        "before": None if before is None else change.describe(before),
        "after": None if after is None else change.describe(after),
        "details": merged or None,
    }


def _insert(tx: Tx, entries: list[dict[str, Any]]) -> None:
    if entries:
        tx.conn.execute(insert(job_history), entries)


# -- reading ------------------------------------------------------------------

# A history cursor is the position of the last entry read: its id, in decimal
# (like the other lists' cursors, a documented position, not an opaque token).
HISTORY_CURSOR_PATTERN = "^[0-9]{1,19}$"


def encode_history_cursor(entry_id: int) -> str:
    return str(entry_id)


def decode_history_cursor(cursor: str) -> int:
    if not re.fullmatch(HISTORY_CURSOR_PATTERN, cursor):
        raise ValidationError("invalid cursor: the next_cursor of a previous page of this "
                              "job's history", field="cursor")
    return int(cursor)


class SqlJobHistory:
    """The recorded changes of jobs, newest first."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def list_history(self, job_id: str, limit: int, cursor: str | None) -> Page:
        """A job's recorded changes (a deleted job's included), newest first."""
        conds = [job_history.c.job_id == job_id]
        if cursor:
            conds.append(job_history.c.id < decode_history_cursor(cursor))
        stmt = (select(job_history).where(*conds).order_by(job_history.c.id.desc())
                .limit(limit + 1))
        with self._db.read() as conn:
            rows = conn.execute(stmt).all()
        items = [HistoryEntry(**dict(r._mapping)) for r in rows[:limit]]
        next_cursor = encode_history_cursor(items[-1].id) if len(rows) > limit and items else None
        return Page(items, next_cursor)

    def job_namespace(self, job_id: str) -> str | None:
        """The namespace of the job's latest recorded change (None: never recorded)."""
        stmt = (select(job_history.c.namespace).where(job_history.c.job_id == job_id)
                .order_by(job_history.c.id.desc()).limit(1))
        with self._db.read() as conn:
            return conn.execute(stmt).scalar()
