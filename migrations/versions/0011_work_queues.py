"""Work queues: runs of ``worker`` targets waiting for, or held by, workers.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02 00:00:00

``work_items`` holds one row per worker run while it is with its queue;
``work_workers`` the workers seen claiming (``cronman.store.work_queue``).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def _json() -> sa.types.TypeEngine[object]:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    tz = sa.DateTime(timezone=True)
    op.create_table(
        "work_items",
        sa.Column("run_id", sa.String(36), nullable=False),
        sa.Column("scheduled_for", tz, nullable=False),
        sa.Column("job_id", sa.String(36), nullable=False),
        sa.Column("namespace", sa.String(128), nullable=False),
        sa.Column("queue", sa.String(64), nullable=False),
        sa.Column("priority", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("due_at", tz, nullable=False),
        sa.Column("available_at", tz, nullable=False),
        sa.Column("enqueued_at", tz, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("payload", _json()),
        sa.Column("heartbeat_timeout", sa.Integer, nullable=False),
        sa.Column("timeout", sa.Integer, nullable=False),
        sa.Column("deadline_at", tz),
        sa.Column("capacity_idle", sa.Integer),
        sa.Column("capacity_wait", sa.Integer),
        sa.Column("lease_token_hash", sa.String(64)),
        sa.Column("worker_id", sa.String(128)),
        sa.Column("claimed_at", tz),
        sa.Column("lease_expires_at", tz),
        sa.Column("last_heartbeat", tz),
        sa.Column("progress", sa.Text),
        sa.Column("percent", sa.Float),
        sa.Column("cancel_requested", sa.Boolean, nullable=False,
                  server_default=sa.text("false")),
        sa.Column("cancel_reason", sa.Text),
        sa.Column("delivery", sa.String(16), nullable=False),
        sa.Column("retry", _json(), nullable=False),
        sa.Column("last_error", sa.Text),
        sa.PrimaryKeyConstraint("run_id", name="pk_work_items"),
    )
    op.create_index("ix_work_items_pick", "work_items",
                    ["namespace", "queue", "state", "priority", "available_at"])
    op.create_index("ix_work_items_lease", "work_items", ["lease_expires_at"])
    op.create_table(
        "work_workers",
        sa.Column("namespace", sa.String(128), nullable=False),
        sa.Column("queue", sa.String(64), nullable=False),
        sa.Column("worker_id", sa.String(128), nullable=False),
        sa.Column("last_seen", tz, nullable=False),
        sa.Column("held", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("slots", sa.Integer, nullable=False, server_default=sa.text("1")),
        sa.PrimaryKeyConstraint("namespace", "queue", "worker_id", name="pk_work_workers"),
    )
    op.create_index("ix_work_workers_last_seen", "work_workers", ["last_seen"])


def downgrade() -> None:
    op.drop_index("ix_work_workers_last_seen", table_name="work_workers")
    op.drop_table("work_workers")
    op.drop_index("ix_work_items_lease", table_name="work_items")
    op.drop_index("ix_work_items_pick", table_name="work_items")
    op.drop_table("work_items")
