"""The persistence layer: ``open_store(url)`` gives a ``Store`` for PostgreSQL or SQLite.

One SQLAlchemy Core implementation serves both databases (``sql_jobs``,
``sql_runs``, ``tokens``, the work queues of worker targets in
``work_queue``); the differences sit behind ``changes`` (NOTIFY vs.
an in-process hub) and ``partitions`` (daily partitions vs. row expiry), and
the statements that differ are listed in ``dialect``.
A Store is thread-safe and meant to be shared: in ``cronman standalone`` the
API and the scheduler use one Store, so that every ``feed()`` of it hears
what any of its writers announce.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from cronman.config import Settings
from cronman.store import triggers
from cronman.store.base import RUNS_REQUESTED, ChangeFeed, Store
from cronman.store.calendars import SqlCalendarStore
from cronman.store.changes import LocalHub, PgChannel
from cronman.store.dependencies import SqlDependencyStore
from cronman.store.engine import PG_POOL_SIZE, Database
from cronman.store.history import SqlJobHistory
from cronman.store.host_policies import SqlHostPolicies
from cronman.store.idempotency import SqlIdempotencyKeys
from cronman.store.limits import SqlLimitStore
from cronman.store.notify_history import SqlNotificationHistory
from cronman.store.notify_outbox import SqlNotificationOutbox
from cronman.store.notify_rules import SqlNotificationRules
from cronman.store.partitions import PgPartitions, SqlitePartitions
from cronman.store.records import Member
from cronman.store.signing_keys import SqlSigningKeyStore
from cronman.store.sql_jobs import SqlJobStore
from cronman.store.sql_runs import SqlRunStore
from cronman.store.tokens import SqlTokenStore
from cronman.store.work_queue import SqlWorkQueue
from cronman.timeutil import utcnow

__all__ = ["RUNS_REQUESTED", "SqlStore", "Store", "open_store"]


class SqlStore:
    """A ``Store`` on one SQLAlchemy database (PostgreSQL or SQLite)."""

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
                purge_tombstones=self._purge_expired)
        else:
            self.partitions = SqlitePartitions(db, node_id=settings.node_id,
                                               purge_tombstones=self._purge_expired)
        self.runs = SqlRunStore(db, prepare_days=self.partitions.prepare_backfill_days,
                                on_succeeded=triggers.after_success)
        # Workflows: the job graph's reads, exclusion calendars.
        self.dependencies = SqlDependencyStore(db)
        self.calendars = SqlCalendarStore(db)
        self.host_policies = SqlHostPolicies(db)
        self.limits = SqlLimitStore(db)
        self.idempotency = SqlIdempotencyKeys(db)
        self.tokens = SqlTokenStore(db)
        self.signing_keys = SqlSigningKeyStore(db)
        self.history = SqlJobHistory(db)
        # The work queues of ``worker`` targets.
        self.work = SqlWorkQueue(db, on_succeeded=triggers.after_success)
        # Notifications (cronman.notify): the notifier's outbox, the API's view
        # of it, and the namespace rules.
        self.notify_outbox = SqlNotificationOutbox(db)
        self.notifications = SqlNotificationHistory(db)
        self.notification_rules = SqlNotificationRules(db)
        self._closed = False

    def _purge_expired(self, older_than: datetime) -> int:
        """Maintenance: tombstones past retention (their count), the trigger
        events recorded before then, and the idempotency keys expired by now."""
        purged = self.jobs.purge_tombstones(older_than)
        self.db.write(lambda tx: triggers.purge_events(tx, older_than))
        self.idempotency.purge(utcnow())
        return purged

    def feed(self) -> ChangeFeed:
        """A new subscription to announcements, for one consumer (close it when done)."""
        return self._channel.subscribe()

    def ping(self) -> bool:
        """Readiness: True when the database answers."""
        return self.db.ping()

    def server_time_ms(self) -> int | None:
        return self.db.server_time_ms()

    def database_member(self) -> Member | None:
        return self.db.members.current if self.db.is_postgres else None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.work.close()
        self._channel.close()
        self.db.dispose()

    def __enter__(self) -> SqlStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def open_store(database_url: str, *, settings: Settings | None = None,
               pool_size: int | None = None) -> SqlStore:
    """A Store on ``database_url`` (``postgresql[+psycopg2]://`` or ``sqlite:///``).

    The schema must exist (``cronman migrate``); check it with
    ``cronman.store.migrate.check_schema_current``.
    """
    settings = settings or Settings(database_url=database_url)
    db = Database(database_url, pool_size=pool_size or PG_POOL_SIZE)
    return SqlStore(db, settings)
