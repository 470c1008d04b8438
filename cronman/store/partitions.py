"""Run-history upkeep: daily partitions on PostgreSQL, row deletion on SQLite.

PostgreSQL: ``scheduled_jobs`` is range-partitioned on ``scheduled_for`` into
``scheduled_jobs_yyyymmdd`` (one UTC day each) plus ``scheduled_jobs_default``,
which catches any row whose day has no partition, so an insert never fails.

Creating a day's partition: ``CREATE TABLE ... (LIKE scheduled_jobs)``, then,
in the same transaction with the default partition locked, move that day's
rows (if any) out of the default partition into the new table, then ``ATTACH
PARTITION`` (which builds the indexes and only needs SHARE UPDATE EXCLUSIVE on
the parent). Without the move, ATTACH would fail on rows the default
partition already holds for that day (a backfill, or a claim beyond the days
created ahead). DDL runs with a short ``lock_timeout``: when it cannot get
its locks it gives up and the next maintenance pass retries.

Dropping: a partition whose whole day is older than ``today - retention``
is DETACHed and DROPped; expired rows in the default partition are deleted.

SQLite keeps one table: there is nothing to create, and expiry deletes rows.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable, Iterable
from datetime import UTC, date, datetime, time, timedelta

from sqlalchemy import delete, select, text

from cronman.store.base import MaintenanceReport
from cronman.store.dialect import upsert
from cronman.store.engine import Database, Tx
from cronman.store.tables import maintenance, scheduled_jobs
from cronman.timeutil import utcnow

log = logging.getLogger(__name__)

PARENT = "scheduled_jobs"
DEFAULT_PARTITION = "scheduled_jobs_default"
_NAME_RE = re.compile(r"^scheduled_jobs_(\d{8})$")
# pg_try_advisory_lock key of the maintenance pass ("cmmain") and the
# transaction lock serialising partition DDL between processes ("cmpart").
MAINTENANCE_LOCK_KEY = 0x636D_6D61_696E
PARTITION_DDL_LOCK_KEY = 0x636D_7061_7274
MAINTENANCE_TASK = "partitions"
DDL_LOCK_TIMEOUT = "5s"
SQLITE_DELETE_CHUNK = 5000


def partition_name(day: date) -> str:
    return f"{PARENT}_{day:%Y%m%d}"


def day_of(t: datetime | date) -> date:
    """The UTC day of ``t`` (a date is taken as is)."""
    if isinstance(t, datetime):
        return (t if t.tzinfo else t.replace(tzinfo=UTC)).astimezone(UTC).date()
    return t


def day_start(day: date) -> datetime:
    return datetime.combine(day, time(), tzinfo=UTC)


class PgPartitions:
    """PartitionManager for PostgreSQL."""

    def __init__(self, db: Database, *, node_id: str, retention_days: int,
                 purge_tombstones: Callable[[datetime], int]) -> None:
        self._db = db
        self._node_id = node_id
        self._retention_days = retention_days
        self._purge_tombstones = purge_tombstones
        self._known: set[date] = set()

    def existing(self) -> dict[date, str]:
        """The daily partitions that exist now, by day."""
        sql = text("SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                   "WHERE i.inhparent = CAST(:parent AS regclass)")
        with self._db.read() as conn:
            names = conn.execute(sql, {"parent": PARENT}).scalars().all()
        found: dict[date, str] = {}
        for name in names:
            m = _NAME_RE.match(name)
            if m:
                found[datetime.strptime(m.group(1), "%Y%m%d").date()] = name
        return found

    def ensure_partitions(self, today: datetime, days_ahead: int) -> list[str]:
        first = day_of(today)
        return self.ensure_days(first + timedelta(days=i) for i in range(days_ahead + 1))

    def prepare_backfill_days(self, days: Iterable[date]) -> list[str]:
        """Create the missing partitions of past ``days`` still within the
        retention (a backfill's rows then land in their own day, not in the
        default partition); older days are left to the default partition,
        whose expired rows maintenance deletes."""
        oldest = day_of(utcnow()) - timedelta(days=self._retention_days)
        return self.ensure_days(d for d in days if d >= oldest)

    def ensure_days(self, days: Iterable[date]) -> list[str]:
        """Create the partitions of ``days`` that are missing; returns the names created."""
        wanted = sorted(set(days) - self._known)
        if not wanted:
            return []
        have = self.existing()
        self._known.update(have)
        created = []
        for day in wanted:
            if day not in have and self._create(day):
                created.append(partition_name(day))
            self._known.add(day)
        return created

    def _create(self, day: date) -> bool:
        name = partition_name(day)
        lo, hi = day_start(day), day_start(day + timedelta(days=1))

        def fn(tx: Tx) -> bool:
            conn = tx.conn
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": PARTITION_DDL_LOCK_KEY})
            if conn.execute(text("SELECT to_regclass(:n)"), {"n": name}).scalar() is not None:
                return False
            conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{DDL_LOCK_TIMEOUT}'")
            conn.exec_driver_sql(f'CREATE TABLE "{name}" (LIKE {PARENT} INCLUDING DEFAULTS)')
            conn.exec_driver_sql(f"LOCK TABLE {DEFAULT_PARTITION} IN ACCESS EXCLUSIVE MODE")
            moved = conn.execute(
                text(f'WITH moved AS (DELETE FROM {DEFAULT_PARTITION} '
                     f'WHERE scheduled_for >= :lo AND scheduled_for < :hi RETURNING *) '
                     f'INSERT INTO "{name}" SELECT * FROM moved'),
                {"lo": lo, "hi": hi},
            ).rowcount
            conn.execute(text(f'ALTER TABLE {PARENT} ATTACH PARTITION "{name}" '
                              f"FOR VALUES FROM (:lo) TO (:hi)"), {"lo": lo, "hi": hi})
            if moved:
                log.info("partition %s: moved %d rows out of %s", name, moved,
                         DEFAULT_PARTITION)
            return True

        return self._db.write(fn)

    def drop_expired(self, today: datetime, retention_days: int) -> list[str]:
        cutoff = day_of(today) - timedelta(days=retention_days)
        dropped = []
        for day, name in sorted(self.existing().items()):
            if day < cutoff:
                self._db.write(functools.partial(_drop, name=name))
                self._known.discard(day)
                dropped.append(name)
        return dropped

    def delete_expired_default_rows(self, today: datetime, retention_days: int) -> int:
        cutoff = day_start(day_of(today) - timedelta(days=retention_days))
        stmt = text(f"DELETE FROM {DEFAULT_PARTITION} WHERE scheduled_for < :c")
        return self._db.write(lambda tx: tx.conn.execute(stmt, {"c": cutoff}).rowcount)

    def run_maintenance(self, today: datetime, days_ahead: int,
                        retention_days: int) -> MaintenanceReport:
        """Create ahead, drop expired, purge old tombstones — by one process at
        a time across the cluster (``pg_try_advisory_lock``; skipped if held)."""
        with self._db.read() as lock_conn:
            got = lock_conn.execute(text("SELECT pg_try_advisory_lock(:k)"),
                                    {"k": MAINTENANCE_LOCK_KEY}).scalar()
            lock_conn.commit()
            if not got:
                log.debug("partition maintenance skipped: another process runs it")
                return MaintenanceReport(ran=False)
            try:
                report = MaintenanceReport(ran=True)
                report.created = self.ensure_partitions(today, days_ahead)
                report.dropped = self.drop_expired(today, retention_days)
                report.expired_rows = self.delete_expired_default_rows(today, retention_days)
                cutoff = day_start(day_of(today) - timedelta(days=retention_days))
                report.purged_tombstones = self._purge_tombstones(cutoff)
                _record(self._db, self._node_id)
                return report
            finally:
                lock_conn.execute(text("SELECT pg_advisory_unlock(:k)"),
                                  {"k": MAINTENANCE_LOCK_KEY})
                lock_conn.commit()


def _drop(tx: Tx, name: str) -> None:
    tx.conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{DDL_LOCK_TIMEOUT}'")
    tx.conn.exec_driver_sql(f'ALTER TABLE {PARENT} DETACH PARTITION "{name}"')
    tx.conn.exec_driver_sql(f'DROP TABLE "{name}"')


def _record(db: Database, node_id: str) -> None:
    stmt = upsert(maintenance, ("name",), db.dialect).values(
        name=MAINTENANCE_TASK, node_id=node_id, ran_at=utcnow())
    db.write(lambda tx: tx.conn.execute(stmt))


class SqlitePartitions:
    """PartitionManager for SQLite: one table, expiry by deleting rows."""

    def __init__(self, db: Database, *, node_id: str,
                 purge_tombstones: Callable[[datetime], int]) -> None:
        self._db = db
        self._node_id = node_id
        self._purge_tombstones = purge_tombstones

    def ensure_partitions(self, today: datetime, days_ahead: int) -> list[str]:
        return []

    def ensure_days(self, days: Iterable[date]) -> list[str]:
        return []

    def prepare_backfill_days(self, days: Iterable[date]) -> list[str]:
        return []

    def drop_expired(self, today: datetime, retention_days: int) -> list[str]:
        """Deletes the expired runs (in short transactions); no partition to name."""
        self.delete_expired_rows(today, retention_days)
        return []

    def delete_expired_rows(self, today: datetime, retention_days: int) -> int:
        cutoff = day_start(day_of(today) - timedelta(days=retention_days))
        sj = scheduled_jobs
        pick = select(sj.c.id).where(sj.c.scheduled_for < cutoff).limit(SQLITE_DELETE_CHUNK)
        stmt = delete(sj).where(sj.c.id.in_(pick.scalar_subquery()),
                                sj.c.scheduled_for < cutoff)
        total = 0
        while True:
            n = self._db.write(lambda tx: tx.conn.execute(stmt).rowcount)
            total += n
            if n < SQLITE_DELETE_CHUNK:
                return total

    def run_maintenance(self, today: datetime, days_ahead: int,
                        retention_days: int) -> MaintenanceReport:
        report = MaintenanceReport(ran=True)
        report.expired_rows = self.delete_expired_rows(today, retention_days)
        cutoff = day_start(day_of(today) - timedelta(days=retention_days))
        report.purged_tombstones = self._purge_tombstones(cutoff)
        _record(self._db, self._node_id)
        return report
