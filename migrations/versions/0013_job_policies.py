"""Job policies: the circuit breaker, run limits, overlap buffers; idempotency keys.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02 00:00:00

``jobs`` gains the definition's ``buffer_limit``, ``pause_after_failures``
and ``max_runs``, and the state the store keeps for them: ``failure_streak``
(consecutive failed or lost runs), ``runs_done`` (runs that ended, skipped
ones left out), ``done_at`` (``max_runs`` reached), ``pause_reason`` (why the
job paused itself), ``pause_note`` (the operator's note of a pause or a
resume) and ``paused_at`` (when it was paused: the key of its ``paused``
notification). ``idempotency_keys`` holds the first answer of each keyed call
until it expires.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ADD COLUMNs (nullable, or a constant default): no table rewrite.
    op.add_column("jobs", sa.Column("buffer_limit", sa.Integer, nullable=True))
    op.add_column("jobs", sa.Column("pause_after_failures", sa.Integer, nullable=True))
    op.add_column("jobs", sa.Column("max_runs", sa.BigInteger, nullable=True))
    op.add_column("jobs", sa.Column("failure_streak", sa.Integer, nullable=False,
                                    server_default=sa.text("0")))
    op.add_column("jobs", sa.Column("runs_done", sa.BigInteger, nullable=False,
                                    server_default=sa.text("0")))
    op.add_column("jobs", sa.Column("done_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("jobs", sa.Column("pause_reason", sa.Text, nullable=True))
    op.add_column("jobs", sa.Column("pause_note", sa.Text, nullable=True))
    op.add_column("jobs", sa.Column("paused_at", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "idempotency_keys",
        sa.Column("scope", sa.String(300), nullable=False),
        sa.Column("key", sa.String(255), nullable=False),
        sa.Column("request_hash", sa.String(64), nullable=False),
        sa.Column("status_code", sa.Integer),
        sa.Column("body", sa.Text),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("scope", "key", name="pk_idempotency_keys"),
    )
    op.create_index("ix_idempotency_keys_expires_at", "idempotency_keys", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_idempotency_keys_expires_at", table_name="idempotency_keys")
    op.drop_table("idempotency_keys")
    for name in ("paused_at", "pause_note", "pause_reason", "done_at", "runs_done", "failure_streak",
                 "max_runs", "pause_after_failures", "buffer_limit"):
        op.drop_column("jobs", name)
