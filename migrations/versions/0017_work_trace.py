"""The trace context of a work item's attempt.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-02 05:30:00

``work_items.traceparent`` / ``tracestate``: the W3C trace context of the
attempt that handed the run to its queue (or took its completion lease),
when tracing was on; the claim answers with it, so the worker joins the
run's trace.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("work_items", sa.Column("traceparent", sa.String(64)))
    op.add_column("work_items", sa.Column("tracestate", sa.String(512)))


def downgrade() -> None:
    with op.batch_alter_table("work_items") as batch:
        batch.drop_column("tracestate")
        batch.drop_column("traceparent")
