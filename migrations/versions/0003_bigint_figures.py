"""64-bit milliseconds and counts: scheduled_jobs.lateness_ms, duration_ms and
skipped_before, jobs.skipped_pending.

A run fired (backfilled, replayed) more than ~24.8 days after its scheduled
time has a lateness over 2^31 ms, and a 1 ms interval skipped for as long a
count as large: 32-bit columns refused those rows. On PostgreSQL the columns
of the partitioned table (and every partition) are rewritten; SQLite's
INTEGER is 64-bit already, only the declared type changes (a table copy).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24 00:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

RUN_COLUMNS = ("lateness_ms", "duration_ms", "skipped_before")
JOB_COLUMNS = ("skipped_pending",)


def _alter(table: str, columns: tuple[str, ...], old: sa.types.TypeEngine,
           new: sa.types.TypeEngine) -> None:
    with op.batch_alter_table(table) as batch:
        for name in columns:
            batch.alter_column(name, existing_type=old, type_=new)


def upgrade() -> None:
    _alter("scheduled_jobs", RUN_COLUMNS, sa.Integer(), sa.BigInteger())
    _alter("jobs", JOB_COLUMNS, sa.Integer(), sa.BigInteger())


def downgrade() -> None:
    _alter("jobs", JOB_COLUMNS, sa.BigInteger(), sa.Integer())
    _alter("scheduled_jobs", RUN_COLUMNS, sa.BigInteger(), sa.Integer())
