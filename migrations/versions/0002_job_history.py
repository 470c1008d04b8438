"""Job history: who changed which job, when, through which request, and how.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-25 00:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def _json() -> sa.types.TypeEngine:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "job_history",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                  autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(36), nullable=False),
        sa.Column("namespace", sa.String(128), nullable=False),
        sa.Column("job_name", sa.String(256), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("job_version", sa.Integer(), nullable=False),
        sa.Column("actor_token_id", sa.String(36), nullable=True),
        sa.Column("actor_name", sa.String(128), nullable=False),
        sa.Column("request_id", sa.String(128), nullable=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("before", _json(), nullable=True),
        sa.Column("after", _json(), nullable=True),
        sa.Column("details", _json(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_job_history"),
    )
    op.create_index("ix_job_history_job_id_id", "job_history", ["job_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_job_history_job_id_id", table_name="job_history")
    op.drop_table("job_history")
