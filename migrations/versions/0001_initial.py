"""Initial schema: jobs, scheduled_jobs (partitioned by day on PostgreSQL), api_tokens, maintenance.

Revision ID: 0001
Revises:
Create Date: 2026-01-01 00:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

IN_FLIGHT = "('claimed', 'running', 'retrying')"


def _json() -> sa.types.TypeEngine:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def _ts() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    is_pg = op.get_bind().dialect.name == "postgresql"

    op.create_table(
        "jobs",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("namespace", sa.String(128), nullable=False),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("version", sa.Integer(), server_default=sa.text("1"), nullable=False),
        sa.Column("schedule", _json(), nullable=False),
        sa.Column("target", _json(), nullable=False),
        sa.Column("retry", _json(), nullable=False),
        sa.Column("misfire", _json(), nullable=False),
        sa.Column("delivery", sa.String(16), nullable=False),
        sa.Column("concurrency", sa.String(16), nullable=False),
        sa.Column("priority", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("start_at", _ts(), nullable=True),
        sa.Column("end_at", _ts(), nullable=True),
        sa.Column("jitter", sa.Float(), nullable=True),
        sa.Column("paused", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("labels", _json(), nullable=False),
        sa.Column("dead_letter", _json(), nullable=True),
        sa.Column("created_at", _ts(), nullable=False),
        sa.Column("updated_at", _ts(), nullable=False),
        sa.Column("deleted_at", _ts(), nullable=True),
        sa.Column("change_seq", sa.BigInteger(), nullable=False),
        sa.Column("last_fire_at", _ts(), nullable=True),
        sa.Column("skipped_pending", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_jobs"),
    )
    op.create_index("uq_jobs_namespace_name_live", "jobs", ["namespace", "name"], unique=True,
                    postgresql_where=sa.text("deleted_at IS NULL"),
                    sqlite_where=sa.text("deleted_at IS NULL"))
    op.create_index("ix_jobs_change_seq", "jobs", ["change_seq"])

    op.create_table(
        "scheduled_jobs",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("job_id", sa.String(36), nullable=False),
        sa.Column("scheduled_for", _ts(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempt", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("node_id", sa.String(128), nullable=True),
        sa.Column("origin", sa.String(16), server_default=sa.text("'schedule'"), nullable=False),
        sa.Column("claimed_at", _ts(), nullable=True),
        sa.Column("started_at", _ts(), nullable=True),
        sa.Column("finished_at", _ts(), nullable=True),
        sa.Column("lateness_ms", sa.Integer(), nullable=True),
        sa.Column("duration_ms", sa.Integer(), nullable=True),
        sa.Column("result", _json(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("lease_expires_at", _ts(), nullable=True),
        sa.Column("next_attempt_at", _ts(), nullable=True),
        sa.Column("skipped_before", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.PrimaryKeyConstraint("id", "scheduled_for", name="pk_scheduled_jobs"),
        sa.UniqueConstraint("job_id", "scheduled_for",
                            name="uq_scheduled_jobs_job_id_scheduled_for"),
        postgresql_partition_by="RANGE (scheduled_for)",
    )
    op.create_index("ix_scheduled_jobs_in_flight", "scheduled_jobs", ["lease_expires_at"],
                    postgresql_where=sa.text(f"status IN {IN_FLIGHT}"),
                    sqlite_where=sa.text(f"status IN {IN_FLIGHT}"))

    op.create_table(
        "api_tokens",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("namespaces", _json(), nullable=True),
        sa.Column("created_at", _ts(), nullable=False),
        sa.Column("revoked_at", _ts(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_api_tokens"),
        sa.UniqueConstraint("token_hash", name="uq_api_tokens_token_hash"),
    )

    op.create_table(
        "maintenance",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("node_id", sa.String(128), nullable=True),
        sa.Column("ran_at", _ts(), nullable=True),
        sa.PrimaryKeyConstraint("name", name="pk_maintenance"),
    )

    if is_pg:
        # Rows whose day has no partition (yet) land here; see cronman.store.partitions.
        op.execute("CREATE TABLE scheduled_jobs_default PARTITION OF scheduled_jobs DEFAULT")
        op.execute("CREATE SEQUENCE jobs_change_seq")


def downgrade() -> None:
    is_pg = op.get_bind().dialect.name == "postgresql"
    if is_pg:
        op.execute("DROP SEQUENCE IF EXISTS jobs_change_seq")
    op.drop_table("maintenance")
    op.drop_table("api_tokens")
    op.drop_index("ix_scheduled_jobs_in_flight", table_name="scheduled_jobs")
    op.drop_table("scheduled_jobs")  # drops its partitions too
    op.drop_index("ix_jobs_change_seq", table_name="jobs")
    op.drop_index("uq_jobs_namespace_name_live", table_name="jobs")
    op.drop_table("jobs")
