"""Workflows: dependencies between jobs, triggers, named exclusion calendars.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24 00:00:00

``jobs.depends_on``, ``jobs.calendars`` and ``scheduled_jobs.gate`` are new
nullable columns (no rewrite of either table). ``job_edges`` is the job
graph, ``trigger_events`` the upstream successes ``after`` jobs heard,
``calendars`` the named exclusion calendars.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def _json() -> sa.types.TypeEngine:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def _ts() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    op.add_column("jobs", sa.Column("depends_on", _json(), nullable=True))
    op.add_column("jobs", sa.Column("calendars", _json(), nullable=True))
    op.add_column("scheduled_jobs", sa.Column("gate", _json(), nullable=True))
    op.create_table(
        "job_edges",
        sa.Column("downstream_id", sa.String(36), nullable=False),
        sa.Column("upstream_id", sa.String(36), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.PrimaryKeyConstraint("downstream_id", "upstream_id", "kind", name="pk_job_edges"),
    )
    op.create_index("ix_job_edges_upstream_id", "job_edges", ["upstream_id"])
    op.create_table(
        "trigger_events",
        sa.Column("downstream_id", sa.String(36), nullable=False),
        sa.Column("event_key", sa.String(64), nullable=False),
        sa.Column("upstream_id", sa.String(36), nullable=False),
        sa.Column("upstream_run_id", sa.String(36), nullable=False),
        sa.Column("upstream_scheduled_for", _ts(), nullable=False),
        sa.Column("upstream_attempt", sa.Integer(), nullable=False),
        sa.Column("consumed_by", sa.String(36), nullable=True),
        sa.Column("created_at", _ts(), nullable=False),
        sa.PrimaryKeyConstraint("downstream_id", "event_key", name="pk_trigger_events"),
    )
    op.create_index("ix_trigger_events_created_at", "trigger_events", ["created_at"])
    op.create_table(
        "calendars",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("namespace", sa.String(128), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("timezone", sa.String(64), nullable=False),
        sa.Column("dates", _json(), nullable=False),
        sa.Column("version", sa.Integer(), server_default=sa.text("1"), nullable=False),
        sa.Column("created_at", _ts(), nullable=False),
        sa.Column("updated_at", _ts(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_calendars"),
        sa.UniqueConstraint("namespace", "name", name="uq_calendars_namespace_name"),
    )


def downgrade() -> None:
    op.drop_table("calendars")
    op.drop_index("ix_trigger_events_created_at", table_name="trigger_events")
    op.drop_table("trigger_events")
    op.drop_index("ix_job_edges_upstream_id", table_name="job_edges")
    op.drop_table("job_edges")
    op.drop_column("scheduled_jobs", "gate")
    op.drop_column("jobs", "calendars")
    op.drop_column("jobs", "depends_on")
