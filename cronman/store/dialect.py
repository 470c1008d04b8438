"""Where PostgreSQL and SQLite differ, for the whole store.

The stores are written once. Each place where the two databases need
different SQL is one function, and only those functions look at the dialect:

- here: row locks (``FOR UPDATE``, ``FOR SHARE``, ``FOR UPDATE SKIP
  LOCKED``: PostgreSQL only, SQLite's writers are serialised), transaction
  advisory locks, ``INSERT ... ON CONFLICT`` (``insert_ignoring_conflicts``,
  ``upsert``: each dialect's own ``insert``), JSON (the label filter and
  array membership: containment vs. ``json_each``; a field's text), the name
  prefix filter (``LIKE`` vs. ``substr``), and what the run history's
  daily partitions change (``partitioned_history``, ``recent_runs_start``)
  and PostgreSQL's percentiles (``sql_percentiles``); ``NOTIFY`` at commit
  (``notify``: nothing on SQLite, whose listeners are in this process);
  a time plus a column's seconds (``plus_seconds``: interval arithmetic vs.
  ``strftime`` on SQLite's text times);
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
  keyset pages), reading live jobs by id (driver tuples vs. ``IN`` chunks);
- ``outbox_bulk``: the notification outbox's batches (runs marked read and
  events assigned with ``UPDATE ... FROM (VALUES ...)`` vs. an executemany,
  each job's first success with ``LATERAL`` vs. one query per chunk of jobs).

The rest is set-up, picking a backend once rather than a statement: the
engine's clocks and SQLite's serialised writers (``engine``, ``connect``);
in ``__init__`` the change channel (NOTIFY vs. an in-process hub), partition
upkeep (daily partitions vs. row expiry) and the database member (a
PostgreSQL server's); the partitions made after an upgrade (``migrate``);
``tables``' time type, naive UTC on SQLite; how waiting claims are woken
(``work_signals``: a LISTEN thread vs. counters bumped in-process).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import String, Table, cast, exists, func, literal, select, text, type_coerce
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.dialects.postgresql import Insert as PgInsert
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import Insert as SqliteInsert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection
from sqlalchemy.sql import Select
from sqlalchemy.sql.elements import ColumnElement

from cronman.store.tables import jobs

POSTGRESQL = "postgresql"
# How far back "recent" run history reaches from today's 00:00 UTC.
RECENT_WINDOW = timedelta(days=1)

# An INSERT with each dialect's ON CONFLICT clauses.
ConflictInsert = PgInsert | SqliteInsert


# -- locks ----------------------------------------------------------------------

def for_update(stmt: Select[Any], dialect: str) -> Select[Any]:
    """``stmt`` locking the rows it reads until the commit (PostgreSQL); as is
    on SQLite, whose writers are serialised."""
    return stmt.with_for_update() if dialect == POSTGRESQL else stmt


def for_share(stmt: Select[Any], dialect: str) -> Select[Any]:
    """``stmt`` locking the rows it reads against changes until the commit
    (``FOR SHARE``, PostgreSQL); as is on SQLite."""
    return stmt.with_for_update(read=True) if dialect == POSTGRESQL else stmt


def for_update_skip_locked(stmt: Select[Any], dialect: str) -> Select[Any]:
    """``stmt`` locking the rows it reads, skipping rows another transaction
    has locked (PostgreSQL); as is on SQLite, whose writers are serialised."""
    return stmt.with_for_update(skip_locked=True) if dialect == POSTGRESQL else stmt


def advisory_xact_lock(conn: Connection, key: int) -> None:
    """Wait for the cluster-wide advisory lock ``key``, held until the
    transaction ends (PostgreSQL); nothing on SQLite, whose writers are
    serialised."""
    if conn.dialect.name == POSTGRESQL:
        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({int(key)})")


# -- INSERT ... ON CONFLICT -------------------------------------------------------

def conflict_insert(table: Table, dialect: str) -> ConflictInsert:
    """An INSERT into ``table`` that can take an ``ON CONFLICT`` clause."""
    return pg_insert(table) if dialect == POSTGRESQL else sqlite_insert(table)


def insert_ignoring_conflicts(table: Table, dialect: str) -> ConflictInsert:
    """``INSERT ... ON CONFLICT DO NOTHING`` into ``table`` (any unique key)."""
    return conflict_insert(table, dialect).on_conflict_do_nothing()


def upsert(table: Table, key: Sequence[str], dialect: str, *,
           changes: Sequence[str] | None = None) -> ConflictInsert:
    """``INSERT ... ON CONFLICT (key) DO UPDATE``: a row whose ``key`` is taken
    takes the new values of ``changes`` (default: every other column)."""
    ins = conflict_insert(table, dialect)
    names = changes if changes is not None else [c.name for c in table.c if c.name not in key]
    return ins.on_conflict_do_update(index_elements=list(key),
                                     set_={n: ins.excluded[n] for n in names})


# -- time arithmetic --------------------------------------------------------------

def plus_seconds(moment: ColumnElement[Any], seconds: ColumnElement[Any],
                 dialect: str) -> ColumnElement[Any]:
    """The time ``moment`` (a bound ``UTCDateTime``) plus ``seconds`` (an integer
    column), computed by the database. SQLite keeps times as naive UTC text
    (``YYYY-MM-DD HH:MM:SS.ffffff``, SQLAlchemy's form): ``strftime`` adds the
    whole seconds and the fraction is carried over as it was written."""
    if dialect == POSTGRESQL:
        return moment + func.make_interval(0, 0, 0, 0, 0, 0, seconds)
    shift = literal("+", String).concat(cast(seconds, String)).concat(" seconds")
    whole = func.strftime("%Y-%m-%d %H:%M:%S", moment, shift)
    return whole.concat(func.substr(moment, 20))


# -- notifications ----------------------------------------------------------------

_NOTIFY = text("SELECT pg_notify(:channel, :payload)")


def notify(conn: Connection, channel: str, payload: str, dialect: str) -> None:
    """Tell the channel's listeners at commit (PostgreSQL); nothing on SQLite,
    whose listeners are told in-process by the caller."""
    if dialect == POSTGRESQL:
        conn.execute(_NOTIFY, {"channel": channel, "payload": payload})


# -- JSON -------------------------------------------------------------------------

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


def json_array_has(column: ColumnElement[Any], value: str, dialect: str
                   ) -> ColumnElement[bool]:
    """Whether the JSON array in ``column`` holds the string ``value``."""
    if dialect == POSTGRESQL:
        return type_coerce(column, JSONB).contains([value])
    each = func.json_each(column).table_valued("value")
    return exists(select(1).select_from(each).where(each.c.value == value))


def json_field_text(column: ColumnElement[Any], key: str, dialect: str) -> ColumnElement[Any]:
    """The text of the JSON object's top-level ``key`` (a plain name) in ``column``."""
    if dialect == POSTGRESQL:
        text: ColumnElement[Any] = type_coerce(column, JSONB)[key].astext
        return text
    return func.json_extract(column, f"$.{key}")


# -- text -------------------------------------------------------------------------

def name_starts_with(prefix: str, dialect: str) -> ColumnElement[bool]:
    """Jobs whose name starts with ``prefix``, case-sensitive on both
    (SQLite's LIKE ignores case; PostgreSQL's ``LIKE`` escapes wildcards)."""
    if dialect == POSTGRESQL:
        return jobs.c.name.startswith(prefix, autoescape=True)
    return func.substr(jobs.c.name, 1, len(prefix)) == prefix


# -- the run history ------------------------------------------------------------

def partitioned_history(dialect: str) -> bool:
    """Whether the run history is split into daily partitions (PostgreSQL;
    SQLite keeps one table): reads by time across jobs then go a few days at
    a time, newest first, so that the planner prunes to those days."""
    return dialect == POSTGRESQL


def sql_percentiles(dialect: str) -> bool:
    """Whether the database computes percentiles (``percentile_disc``,
    PostgreSQL); SQLite has none, its rows are summed up in Python."""
    return dialect == POSTGRESQL


def recent_runs_start(dialect: str, now: datetime) -> datetime | None:
    """Where "recent" run history starts: yesterday 00:00 UTC on PostgreSQL,
    None on SQLite (one table, nothing to split).

    A query ordered by scheduled_for over every daily partition is planned
    over all ~50 of them and its Merge Append probes each; most answers (a
    job's newest runs) lie in the last day, so the run store asks the recent
    partitions first and the older ones only for what is missing.
    """
    if not partitioned_history(dialect):
        return None
    return datetime(now.year, now.month, now.day, tzinfo=UTC) - RECENT_WINDOW
