"""Host policies: what each namespace's runs may ask of their host.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01 00:00:00

One row per namespace an admin token granted more (or less) than the
operator's default (``CRONMAN_HOST_POLICY``); see ``cronman.host_policy``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "host_policies",
        sa.Column("namespace", sa.String(128), nullable=False),
        sa.Column("policy", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"),
                  nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_by", sa.String(36)),
        sa.PrimaryKeyConstraint("namespace", name="pk_host_policies"),
    )


def downgrade() -> None:
    op.drop_table("host_policies")
