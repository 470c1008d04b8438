"""The schema, as SQLAlchemy Core tables. Alembic migrations must yield exactly this.

``scheduled_jobs`` holds one row per dispatched fire time. On PostgreSQL it is
range-partitioned by day on ``scheduled_for`` (partitions ``scheduled_jobs_yyyymmdd``,
created and dropped by ``cronman.store.partitions``); on SQLite it is one table.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    Sequence,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)

# In-flight statuses: a run in one of these holds a lease.
IN_FLIGHT_STATUSES = ("claimed", "running", "retrying")
FINAL_STATUSES = ("succeeded", "failed", "skipped", "lost")
RUN_STATUSES = IN_FLIGHT_STATUSES + FINAL_STATUSES


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend (SQLite stores naive text)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the store")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


JsonType = JSON().with_variant(JSONB(), "postgresql")

jobs = Table(
    "jobs",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("namespace", String(128), nullable=False),
    Column("name", String(256), nullable=False),
    Column("version", Integer, nullable=False, server_default=text("1")),
    Column("schedule", JsonType, nullable=False),
    Column("target", JsonType, nullable=False),
    Column("retry", JsonType, nullable=False),
    Column("misfire", JsonType, nullable=False),
    Column("delivery", String(16), nullable=False),
    Column("concurrency", String(16), nullable=False),
    Column("priority", Integer, nullable=False, server_default=text("0")),
    Column("start_at", UTCDateTime()),
    Column("end_at", UTCDateTime()),
    Column("jitter", Float),
    Column("paused", Boolean, nullable=False, server_default=text("false")),
    Column("labels", JsonType, nullable=False),
    Column("dead_letter", JsonType),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    # Soft delete: schedulers following the change feed must see deletes.
    # Tombstones are purged after the retention period.
    Column("deleted_at", UTCDateTime()),
    # Monotonic change counter (per database), the watermark of the polling safety net.
    Column("change_seq", BigInteger, nullable=False),
    # Where the schedule stands: the latest fire time that was claimed (or
    # skipped by misfire policy). A restarted node resumes from here.
    Column("last_fire_at", UTCDateTime()),
    # Fire times passed over by the misfire policy, reported on the next run.
    Column("skipped_pending", Integer, nullable=False, server_default=text("0")),
)
Index(
    "uq_jobs_namespace_name_live",
    jobs.c.namespace,
    jobs.c.name,
    unique=True,
    postgresql_where=jobs.c.deleted_at.is_(None),
    sqlite_where=jobs.c.deleted_at.is_(None),
)
Index("ix_jobs_change_seq", jobs.c.change_seq)

# PostgreSQL source of ``jobs.change_seq`` (SQLite uses max + 1 under its write
# lock). Not a column default: the store always writes change_seq explicitly.
jobs_change_seq = Sequence("jobs_change_seq", metadata=metadata)

scheduled_jobs = Table(
    "scheduled_jobs",
    metadata,
    Column("id", String(36), nullable=False),
    Column("job_id", String(36), nullable=False),
    Column("scheduled_for", UTCDateTime(), nullable=False),
    Column("status", String(16), nullable=False),
    Column("attempt", Integer, nullable=False, server_default=text("0")),
    # Which node holds the run; NULL for a run the API requested (trigger,
    # replay, backfill) that no node has taken yet.
    Column("node_id", String(128)),
    # How the run came to be: schedule, trigger, backfill, replay.
    Column("origin", String(16), nullable=False, server_default=text("'schedule'")),
    Column("claimed_at", UTCDateTime()),
    Column("started_at", UTCDateTime()),
    Column("finished_at", UTCDateTime()),
    Column("lateness_ms", Integer),
    Column("duration_ms", Integer),
    Column("result", JsonType),
    Column("error", Text),
    Column("lease_expires_at", UTCDateTime()),
    Column("next_attempt_at", UTCDateTime()),
    Column("skipped_before", Integer, nullable=False, server_default=text("0")),
    PrimaryKeyConstraint("id", "scheduled_for", name="pk_scheduled_jobs"),
    UniqueConstraint("job_id", "scheduled_for", name="uq_scheduled_jobs_job_id_scheduled_for"),
    postgresql_partition_by="RANGE (scheduled_for)",
)
# The sweeper and the pickup of API-requested runs only look at in-flight rows.
Index(
    "ix_scheduled_jobs_in_flight",
    scheduled_jobs.c.lease_expires_at,
    postgresql_where=scheduled_jobs.c.status.in_(IN_FLIGHT_STATUSES),
    sqlite_where=scheduled_jobs.c.status.in_(IN_FLIGHT_STATUSES),
)

api_tokens = Table(
    "api_tokens",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("name", String(128), nullable=False),
    # sha256 hex of the secret token; the token itself is shown once, at creation.
    Column("token_hash", String(64), nullable=False, unique=True),
    # NULL for an admin token (all namespaces).
    Column("namespaces", JsonType),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("revoked_at", UTCDateTime()),
)

# A cluster-wide single row per named maintenance task (partition upkeep, lease
# sweeping) recording who ran it last; the lock itself is an advisory lock on
# PostgreSQL and unnecessary on SQLite (one process).
maintenance = Table(
    "maintenance",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("node_id", String(128)),
    Column("ran_at", UTCDateTime()),
)
