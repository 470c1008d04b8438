"""Token history: who created or revoked which API token, when, through which request.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-27 00:00:00

A new table only; existing tokens get no rows (their creation predates the
record).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "token_history",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                  autoincrement=True, nullable=False),
        sa.Column("token_id", sa.String(36), nullable=False),
        sa.Column("token_name", sa.String(128), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("namespaces", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"),
                  nullable=True),
        sa.Column("read_only", sa.Boolean(), nullable=False),
        sa.Column("actor_token_id", sa.String(36), nullable=True),
        sa.Column("actor_name", sa.String(128), nullable=False),
        sa.Column("request_id", sa.String(128), nullable=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_token_history"),
    )
    op.create_index("ix_token_history_token_id_id", "token_history", ["token_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_token_history_token_id_id", table_name="token_history")
    op.drop_table("token_history")
