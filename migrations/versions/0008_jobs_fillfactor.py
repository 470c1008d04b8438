"""Jobs: room on each page for their cursor updates.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-27 00:00:00

Every claim moves its jobs' cursors (``last_fire_at``, ``skipped_pending``):
one UPDATE of a wide row per fire. With full pages each is a new tuple on
another page and an entry in every index of ``jobs``; with a fifth of each
page free, nearly all are heap-only (HOT) updates on the same page, which
cost PostgreSQL about half (``ops/bench/fire_rows_bench.py``: 51 -> 25 µs per row). The
setting applies to pages written from now on; ``VACUUM FULL jobs`` would
apply it to existing ones (not done here: it locks the table). PostgreSQL
only; SQLite has no such setting.
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

JOBS_FILLFACTOR = 80


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"ALTER TABLE jobs SET (fillfactor = {JOBS_FILLFACTOR})")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE jobs RESET (fillfactor)")
