"""Engines and transactions for PostgreSQL (psycopg2) and SQLite.

``Database`` wraps one SQLAlchemy engine and gives the stores two ways in:
``read()`` (a connection in a read transaction) and ``write(fn)`` (``fn`` runs
in one write transaction, announcements are delivered with the commit, and
deadlocks are retried). Driver and connection failures become
``StoreUnavailable``.

SQLite: WAL mode, a busy timeout, and writers serialised inside the process
(one lock per database file, shared by every engine of the process on that
file) with ``BEGIN IMMEDIATE``, so "database is locked" does not escape to
callers: the API threads and the scheduler threads of ``cronman standalone``
queue on the lock instead of on SQLite's busy handler.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from sqlalchemy import create_engine, event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, Connection, CursorResult, Engine, Row
from sqlalchemy.pool import StaticPool
from sqlalchemy.sql.base import Executable

from cronman.errors import StoreUnavailable
from cronman.store.connect import MemberWatch, engine_connect_args
from cronman.store.connect import normalise_url as normalise_url
from cronman.timeutil import now_ms

log = logging.getLogger(__name__)

T = TypeVar("T")

MIN_SQLITE_VERSION = (3, 35, 0)  # INSERT ... ON CONFLICT ... RETURNING
SQLITE_BUSY_TIMEOUT_MS = 30_000
PG_POOL_SIZE = 10
PG_MAX_OVERFLOW = 10
PG_POOL_TIMEOUT = 10.0
PG_POOL_RECYCLE = 1800
WRITE_ATTEMPTS = 4
# deadlock_detected, serialization_failure: transient, safe to run the transaction again.
_RETRYABLE_PGCODES = frozenset({"40P01", "40001"})

_sqlite_locks: dict[str, threading.RLock] = {}
_sqlite_locks_guard = threading.Lock()


class Announcer(Protocol):
    """How a write transaction's announcements travel (see ``cronman.store.changes``)."""

    def in_transaction(self, conn: Connection, ids: Sequence[str]) -> None: ...

    def committed(self, ids: Sequence[str]) -> None: ...


@dataclass
class Tx:
    """One write transaction: its connection and what it will announce at commit."""

    conn: Connection
    dialect: str
    announced: list[str] = field(default_factory=list)

    def announce(self, ids: Sequence[str]) -> None:
        self.announced.extend(ids)

    def now_ms(self) -> int:
        """The database server's clock in Unix ms, read now (PostgreSQL's
        ``clock_timestamp()``); this host's for SQLite, which runs in this process."""
        if self.dialect != "postgresql":
            return now_ms()
        return int(self.conn.exec_driver_sql(_NOW_MS_SQL).scalar_one())


_NOW_MS_SQL = "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint"


def make_engine(url: URL, *, pool_size: int = PG_POOL_SIZE,
                members: MemberWatch | None = None) -> Engine:
    """An engine set up for cronman's use of the given (normalised) database URL;
    ``members`` hears which member each new PostgreSQL connection landed on."""
    if url.get_backend_name() == "postgresql":
        engine = create_engine(
            url,
            pool_pre_ping=True,
            pool_size=pool_size,
            max_overflow=PG_MAX_OVERFLOW,
            pool_timeout=PG_POOL_TIMEOUT,
            pool_recycle=PG_POOL_RECYCLE,
            connect_args=engine_connect_args(url, "cronman"),
        )
        if members is not None:
            watch = members
            event.listen(engine, "connect",
                         lambda dbapi_conn, _record: watch.saw_connection(dbapi_conn))
        return engine
    if sqlite3.sqlite_version_info < MIN_SQLITE_VERSION:
        raise RuntimeError(
            f"SQLite {sqlite3.sqlite_version} is too old: cronman needs "
            f"{'.'.join(map(str, MIN_SQLITE_VERSION))} or newer (RETURNING)"
        )
    kwargs: dict[str, Any] = {
        "connect_args": {"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
    }
    if _sqlite_path(url) is None:
        # A private in-memory database exists once per connection: share one.
        kwargs["poolclass"] = StaticPool
    engine = create_engine(url, **kwargs)
    event.listen(engine, "connect", _sqlite_on_connect)
    event.listen(engine, "begin", _sqlite_on_begin)
    return engine


def _sqlite_on_connect(dbapi_conn: Any, _record: Any) -> None:
    # Let SQLAlchemy, not the sqlite3 module, issue BEGIN (see _sqlite_on_begin).
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    try:
        cur.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        cur.execute("PRAGMA journal_mode = WAL")
        # Durable against a crash of the process (not of the machine) in WAL mode.
        cur.execute("PRAGMA synchronous = NORMAL")
    finally:
        cur.close()


def _sqlite_on_begin(conn: Connection) -> None:
    # Writers take the write lock up front: a deferred transaction that
    # upgrades to a writer can fail with SQLITE_BUSY without waiting.
    mode = conn.get_execution_options().get("cronman_begin", "DEFERRED")
    conn.exec_driver_sql(f"BEGIN {mode}")


def _sqlite_path(url: URL) -> str | None:
    db = url.database
    if not db or db == ":memory:" or "mode=memory" in str(url):
        return None
    return os.path.realpath(db)


def _sqlite_lock(url: URL) -> threading.RLock:
    key = _sqlite_path(url) or f"memory:{id(url)}"
    with _sqlite_locks_guard:
        lock = _sqlite_locks.get(key)
        if lock is None:
            lock = _sqlite_locks[key] = threading.RLock()
        return lock


@contextmanager
def translate_errors() -> Iterator[None]:
    """Turn driver and connection failures into ``StoreUnavailable``."""
    try:
        yield
    except (sa_exc.OperationalError, sa_exc.InterfaceError) as exc:
        raise StoreUnavailable(f"database unavailable: {_reason(exc)}") from exc
    except sa_exc.TimeoutError as exc:  # pool exhausted
        raise StoreUnavailable(f"database unavailable: {exc}") from exc
    except sa_exc.DBAPIError as exc:
        if exc.connection_invalidated:
            raise StoreUnavailable(f"database unavailable: {_reason(exc)}") from exc
        raise


def _reason(exc: sa_exc.DBAPIError) -> str:
    return str(exc.orig).strip().splitlines()[0] if exc.orig is not None else str(exc)


def _retryable(exc: sa_exc.DBAPIError) -> bool:
    orig = exc.orig
    if getattr(orig, "pgcode", None) in _RETRYABLE_PGCODES:
        return True
    return isinstance(orig, sqlite3.OperationalError) and "locked" in str(orig)


def _rows(result: CursorResult[Any]) -> list[Row[Any]]:
    return list(result.all()) if result.returns_rows else []


class _NullAnnouncer:
    def in_transaction(self, conn: Connection, ids: Sequence[str]) -> None:
        pass

    def committed(self, ids: Sequence[str]) -> None:
        pass


class Database:
    """One engine plus the transaction discipline of the store."""

    def __init__(self, database_url: str, *, pool_size: int = PG_POOL_SIZE) -> None:
        self.url = normalise_url(database_url)
        self.dialect = self.url.get_backend_name()
        self.members = MemberWatch()
        self.engine = make_engine(self.url, pool_size=pool_size, members=self.members)
        self.announcer: Announcer = _NullAnnouncer()
        self._write_lock: AbstractContextManager[Any] = (
            _sqlite_lock(self.url) if self.dialect == "sqlite" else nullcontext()
        )

    @property
    def is_postgres(self) -> bool:
        return self.dialect == "postgresql"

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A connection inside a read transaction (rolled back at the end)."""
        with translate_errors(), self.engine.connect() as conn:
            yield conn

    def write(self, fn: Callable[[Tx], T]) -> T:
        """Run ``fn`` in one write transaction and commit.

        Announcements made through ``Tx.announce`` are issued inside the
        transaction (PostgreSQL NOTIFY, delivered at commit) or published
        after the commit (SQLite). Deadlocks and serialisation failures rerun
        ``fn`` a few times, so ``fn`` must only touch the database.
        """
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            try:
                with translate_errors():
                    return self._write_once(fn)
            except StoreUnavailable as exc:
                cause = exc.__cause__
                if (attempt == WRITE_ATTEMPTS or not isinstance(cause, sa_exc.DBAPIError)
                        or not _retryable(cause)):
                    raise
                log.info("write transaction retried (attempt %d): %s", attempt, exc)
                time.sleep(0.01 * attempt)
        raise AssertionError("unreachable")

    def write_one(self, stmt: Executable, params: Mapping[str, Any]) -> list[Row[Any]]:
        """One statement as a transaction of its own, and the rows it returns.
        On PostgreSQL it runs in autocommit: a single statement is atomic by
        itself, and BEGIN and COMMIT would be two more round trips."""
        if not self.is_postgres:
            return self.write(lambda tx: _rows(tx.conn.execute(stmt, params)))
        with translate_errors(), self.engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT")
            return _rows(conn.execute(stmt, params))

    def _write_once(self, fn: Callable[[Tx], T]) -> T:
        with self._write_lock, self.engine.connect() as conn:
            if self.dialect == "sqlite":
                conn = conn.execution_options(cronman_begin="IMMEDIATE")
            tx = Tx(conn, self.dialect)
            with conn.begin():
                result = fn(tx)
                if tx.announced:
                    self.announcer.in_transaction(conn, tx.announced)
        if tx.announced:
            self.announcer.committed(tx.announced)
        return result

    def ping(self) -> bool:
        try:
            with self.read() as conn:
                conn.exec_driver_sql("SELECT 1").scalar()
            return True
        except Exception:  # readiness probe: any failure means "not ready"
            log.debug("database ping failed", exc_info=True)
            return False

    def server_time_ms(self) -> int | None:
        """The database server's clock in Unix ms (PostgreSQL), or None when it
        has no clock of its own (SQLite runs in this process). Raises
        ``StoreUnavailable``."""
        if not self.is_postgres:
            return None
        with self.read() as conn:
            value = conn.exec_driver_sql(_NOW_MS_SQL).scalar()
        return None if value is None else int(value)

    def dispose(self) -> None:
        self.engine.dispose()
