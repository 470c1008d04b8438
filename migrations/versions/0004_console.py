"""The operator console: runs across jobs by status and time, read-only tokens.

``ix_scheduled_jobs_status_time`` (status, scheduled_for, id) serves
``GET /v1/runs`` and the run statistics. On PostgreSQL an index on the
partitioned parent is built on every partition (and on those attached later);
on a large history the upgrade takes as long as that build.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25 00:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_scheduled_jobs_status_time", "scheduled_jobs",
                    ["status", "scheduled_for", "id"])
    with op.batch_alter_table("api_tokens") as batch:
        batch.add_column(sa.Column("read_only", sa.Boolean(), nullable=False,
                                   server_default=sa.text("false")))


def downgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_column("read_only")
    op.drop_index("ix_scheduled_jobs_status_time", table_name="scheduled_jobs")
