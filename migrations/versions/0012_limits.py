"""Limits per destination and quotas per namespace.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02 00:00:00

``limits``: named limits (what they match, rate, burst, concurrency) every
node holds the fires to; ``namespace_quotas``: each namespace's bounds (jobs,
fires per second, concurrent runs). See ``cronman.limits``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "limits",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("match_kind", sa.String(16), nullable=False),
        sa.Column("match_value", sa.String(2048), nullable=False),
        sa.Column("rate", sa.Float()),
        sa.Column("burst", sa.Integer()),
        sa.Column("concurrency", sa.Integer()),
        sa.Column("version", sa.Integer(), server_default=sa.text("1"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_by", sa.String(36)),
        sa.PrimaryKeyConstraint("name", name="pk_limits"),
    )
    op.create_table(
        "namespace_quotas",
        sa.Column("namespace", sa.String(128), nullable=False),
        sa.Column("max_jobs", sa.Integer()),
        sa.Column("fires_per_second", sa.Float()),
        sa.Column("burst", sa.Integer()),
        sa.Column("concurrent_runs", sa.Integer()),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_by", sa.String(36)),
        sa.PrimaryKeyConstraint("namespace", name="pk_namespace_quotas"),
    )


def downgrade() -> None:
    op.drop_table("namespace_quotas")
    op.drop_table("limits")
