"""Where PostgreSQL and SQLite differ, for the job and run stores.

The stores (``sql_jobs``, ``sql_runs`` and its ``run_*`` parts, ``job_search``)
are written once. Each place where the two databases need different SQL is
one function, and only those functions look at the dialect:

- here: row locking for takers (``FOR UPDATE SKIP LOCKED``), upserts
  (``ON CONFLICT DO UPDATE`` of each dialect), notifications (``pg_notify``
  vs. nothing: SQLite's listeners are in this process), the label
  filter (JSON containment), the name prefix filter (``LIKE`` vs.
  ``substr``), the partitioned run history's recent window;
- ``change_seq``: drawing change_seq values (a sequence under an advisory
  lock vs. max + 1) and settling writers before a watermark read;
- ``run_bulk``: inserting runs (``INSERT ... ON CONFLICT DO NOTHING``
  rendered by psycopg2 vs. an executemany), writing results (``UPDATE ...
  FROM (VALUES ...)`` vs. an executemany), advancing the jobs' cursors, the
  last run of each job (``LATERAL`` vs. one query per job), keyed run updates
  kept to primary-key lookups (``key_lookups``: planner settings for the
  statements inside, on PostgreSQL only);
- ``job_bulk``: inserting jobs (one statement from a JSON array vs. a name
  check and an executemany), streaming live jobs (server-side cursor vs.
  keyset pages), reading live jobs by id (driver tuples vs. ``IN`` chunks).

Elsewhere in ``cronman.store``: the engine's clocks and SQLite's serialised
writers (``engine``), the change feed (``changes``) and partition upkeep
(``partitions``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Table, exists, func, select, text, type_coerce
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection
from sqlalchemy.sql import Executable, Select
from sqlalchemy.sql.elements import ColumnElement

from cronman.store.tables import jobs

POSTGRESQL = "postgresql"
# How far back "recent" run history reaches from today's 00:00 UTC.
RECENT_WINDOW = timedelta(days=1)


def for_update_skip_locked(stmt: Select[Any], dialect: str) -> Select[Any]:
    """``stmt`` locking the rows it reads, skipping rows another transaction
    has locked (PostgreSQL); as is on SQLite, whose writers are serialised."""
    return stmt.with_for_update(skip_locked=True) if dialect == POSTGRESQL else stmt


def upsert(table: Table, values: dict[str, Any], *, keys: Sequence[str],
           changes: Sequence[str], dialect: str) -> Executable:
    """Insert ``values``, or on a conflict on ``keys`` set the ``changes`` columns."""
    stmt = (pg_insert if dialect == POSTGRESQL else sqlite_insert)(table).values(**values)
    return stmt.on_conflict_do_update(index_elements=list(keys),
                                      set_={c: stmt.excluded[c] for c in changes})


_NOTIFY = text("SELECT pg_notify(:channel, :payload)")


def notify(conn: Connection, channel: str, payload: str, dialect: str) -> None:
    """Tell the channel's listeners at commit (PostgreSQL); nothing on SQLite,
    whose listeners are told in-process by the caller."""
    if dialect == POSTGRESQL:
        conn.execute(_NOTIFY, {"channel": channel, "payload": payload})


def labels_match(labels: Sequence[tuple[str, str]], dialect: str) -> list[ColumnElement[bool]]:
    """Conditions for jobs whose labels hold every (key, value) of ``labels``."""
    if dialect == POSTGRESQL:
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


def name_starts_with(prefix: str, dialect: str) -> ColumnElement[bool]:
    """Jobs whose name starts with ``prefix``, case-sensitive on both
    (SQLite's LIKE ignores case; PostgreSQL's ``LIKE`` escapes wildcards)."""
    if dialect == POSTGRESQL:
        return jobs.c.name.startswith(prefix, autoescape=True)
    return func.substr(jobs.c.name, 1, len(prefix)) == prefix


def recent_runs_start(dialect: str, now: datetime) -> datetime | None:
    """Where "recent" run history starts: yesterday 00:00 UTC on PostgreSQL,
    None on SQLite (one table, nothing to split).

    A query ordered by scheduled_for over every daily partition is planned
    over all ~50 of them and its Merge Append probes each; most answers (a
    job's newest runs) lie in the last day, so the run store asks the recent
    partitions first and the older ones only for what is missing.
    """
    if dialect != POSTGRESQL:
        return None
    return datetime(now.year, now.month, now.day, tzinfo=UTC) - RECENT_WINDOW
