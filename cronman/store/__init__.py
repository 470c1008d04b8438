"""The persistence layer: ``open_store(url)`` gives a ``Store`` for PostgreSQL or SQLite.

One SQLAlchemy Core implementation serves both databases (``sql_jobs``,
``sql_runs``, ``tokens``); the differences sit behind ``changes`` (NOTIFY vs.
an in-process hub) and ``partitions`` (daily partitions vs. row expiry).
A Store is thread-safe and meant to be shared: in ``cronman standalone`` the
API and the scheduler use one Store, so that every ``feed()`` of it hears
what any of its writers announce.
"""

from __future__ import annotations

from typing import Any

from cronman.config import Settings
from cronman.store.base import RUNS_REQUESTED, ChangeFeed
from cronman.store.changes import LocalHub, PgChannel
from cronman.store.engine import PG_POOL_SIZE, Database
from cronman.store.partitions import PgPartitions, SqlitePartitions
from cronman.store.sql_jobs import SqlJobStore
from cronman.store.sql_runs import SqlRunStore
from cronman.store.tokens import SqlTokenStore

__all__ = ["RUNS_REQUESTED", "Store", "open_store"]


class Store:
    """Facade over one database: ``jobs``, ``runs``, ``tokens``, ``partitions``."""

    def __init__(self, db: Database, settings: Settings) -> None:
        self.settings = settings
        self.db = db
        self.engine = db.engine
        self.dialect: str = db.dialect
        self._channel: PgChannel | LocalHub = (
            PgChannel(db.engine) if db.is_postgres else LocalHub()
        )
        db.announcer = self._channel
        self.jobs = SqlJobStore(db)
        self.partitions: PgPartitions | SqlitePartitions
        if db.is_postgres:
            self.partitions = PgPartitions(
                db, node_id=settings.node_id, retention_days=settings.history_retention_days,
                purge_tombstones=self.jobs.purge_tombstones)
        else:
            self.partitions = SqlitePartitions(db, node_id=settings.node_id,
                                               purge_tombstones=self.jobs.purge_tombstones)
        self.runs = SqlRunStore(db, prepare_days=self.partitions.prepare_backfill_days)
        self.tokens = SqlTokenStore(db)
        self._closed = False

    def feed(self) -> ChangeFeed:
        """A new subscription to announcements, for one consumer (close it when done)."""
        return self._channel.subscribe()

    def ping(self) -> bool:
        """Readiness: True when the database answers."""
        return self.db.ping()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._channel.close()
        self.db.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def open_store(database_url: str, *, settings: Settings | None = None,
               pool_size: int | None = None) -> Store:
    """A Store on ``database_url`` (``postgresql[+psycopg2]://`` or ``sqlite:///``).

    The schema must exist (``cronman migrate``); check it with
    ``cronman.store.migrate.check_schema_current``.
    """
    settings = settings or Settings(database_url=database_url)
    db = Database(database_url, pool_size=pool_size or PG_POOL_SIZE)
    return Store(db, settings)
