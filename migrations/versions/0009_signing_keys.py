"""Per-namespace signing key generations.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01 00:00:00

One small row per namespace whose signing key was rotated (its generation
and the end of the previous key's overlap window); the keys are derived from
the cluster secret and never stored.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "signing_keys",
        sa.Column("namespace", sa.String(128), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("previous_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("rotated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("namespace", name="pk_signing_keys"),
    )


def downgrade() -> None:
    op.drop_table("signing_keys")
