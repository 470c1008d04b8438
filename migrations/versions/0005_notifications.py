"""Notifications: a job's rules, namespace rules, the outbox and the notifier's state.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-26 00:00:00

``scheduled_jobs.notified_attempt`` is a new nullable column (no rewrite of
the table). ``ix_scheduled_jobs_unnotified`` is a partial index holding only
failed/lost runs the notifier has not read; on PostgreSQL it is made on
every partition, which reads each partition once: on a large run history
run the migration when the write load is low.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

UNNOTIFIED = ("status IN ('failed', 'lost') "
              "AND (notified_attempt IS NULL OR notified_attempt < attempt)")
OPEN = "status IN ('pending', 'sending')"


def _json() -> sa.types.TypeEngine:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def _ts() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    op.add_column("jobs", sa.Column("notify", _json(), nullable=True))
    op.add_column("scheduled_jobs", sa.Column("notified_attempt", sa.Integer(), nullable=True))
    op.create_index("ix_scheduled_jobs_unnotified", "scheduled_jobs", ["scheduled_for"],
                    postgresql_where=sa.text(UNNOTIFIED), sqlite_where=sa.text(UNNOTIFIED))

    op.create_table(
        "notification_rules",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("namespace", sa.String(128), nullable=False),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("rule", _json(), nullable=False),
        sa.Column("version", sa.Integer(), server_default=sa.text("1"), nullable=False),
        sa.Column("created_at", _ts(), nullable=False),
        sa.Column("updated_at", _ts(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_notification_rules"),
        sa.UniqueConstraint("namespace", "name", name="uq_notification_rules_namespace_name"),
    )
    op.create_table(
        "notifications",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("namespace", sa.String(128), nullable=False),
        sa.Column("job_id", sa.String(36), nullable=False),
        sa.Column("job_name", sa.String(256), nullable=False),
        sa.Column("rule_key", sa.String(128), nullable=False),
        sa.Column("group_key", sa.String(64), nullable=False),
        sa.Column("channel", _json(), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("event", sa.String(16), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("due_at", _ts(), nullable=False),
        sa.Column("next_attempt_at", _ts(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("event_count", sa.Integer(), server_default=sa.text("1"), nullable=False),
        sa.Column("created_at", _ts(), nullable=False),
        sa.Column("updated_at", _ts(), nullable=False),
        sa.Column("sent_at", _ts(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_notifications"),
    )
    op.create_index("ix_notifications_due", "notifications", ["next_attempt_at"],
                    postgresql_where=sa.text(OPEN), sqlite_where=sa.text(OPEN))
    op.create_index("ix_notifications_job_id_id", "notifications", ["job_id", "id"])
    op.create_table(
        "notification_events",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                  autoincrement=True, nullable=False),
        sa.Column("notification_id", sa.String(36), nullable=True),
        sa.Column("rule_key", sa.String(128), nullable=False),
        sa.Column("event_key", sa.String(128), nullable=False),
        sa.Column("event", sa.String(16), nullable=False),
        sa.Column("job_id", sa.String(36), nullable=False),
        sa.Column("run_id", sa.String(36), nullable=True),
        sa.Column("scheduled_for", _ts(), nullable=True),
        sa.Column("occurred_at", _ts(), nullable=False),
        sa.Column("detail", _json(), nullable=True),
        sa.Column("created_at", _ts(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_notification_events"),
        sa.UniqueConstraint("rule_key", "event_key",
                            name="uq_notification_events_rule_key_event_key"),
    )
    op.create_index("ix_notification_events_notification_id", "notification_events",
                    ["notification_id"])
    op.create_table(
        "notification_groups",
        sa.Column("group_key", sa.String(64), nullable=False),
        sa.Column("latest_id", sa.String(36), nullable=False),
        sa.Column("latest_due_at", _ts(), nullable=False),
        sa.Column("open_digest_id", sa.String(36), nullable=True),
        sa.PrimaryKeyConstraint("group_key", name="pk_notification_groups"),
    )
    op.create_table(
        "notification_failing_jobs",
        sa.Column("job_id", sa.String(36), nullable=False),
        sa.Column("last_failure_at", _ts(), nullable=False),
        sa.Column("last_failure_run_id", sa.String(36), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("since", _ts(), nullable=False),
        sa.PrimaryKeyConstraint("job_id", name="pk_notification_failing_jobs"),
    )
    op.create_table(
        "notifier_cursors",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("at", _ts(), nullable=False),
        sa.Column("node_id", sa.String(128), nullable=True),
        sa.PrimaryKeyConstraint("name", name="pk_notifier_cursors"),
    )


def downgrade() -> None:
    op.drop_table("notifier_cursors")
    op.drop_table("notification_failing_jobs")
    op.drop_table("notification_groups")
    op.drop_index("ix_notification_events_notification_id", table_name="notification_events")
    op.drop_table("notification_events")
    op.drop_index("ix_notifications_job_id_id", table_name="notifications")
    op.drop_index("ix_notifications_due", table_name="notifications")
    op.drop_table("notifications")
    op.drop_table("notification_rules")
    op.drop_index("ix_scheduled_jobs_unnotified", table_name="scheduled_jobs")
    op.drop_column("scheduled_jobs", "notified_attempt")
    op.drop_column("jobs", "notify")
