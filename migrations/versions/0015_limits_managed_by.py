"""Who manages a limit: ``limits.managed_by``.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02 05:30:00

``jobs apply`` writes ``apply`` there on the limits it makes from files, and
prunes only those (``cronman.apply.limits``); a limit made by hand has none.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("limits", sa.Column("managed_by", sa.String(32)))


def downgrade() -> None:
    with op.batch_alter_table("limits") as batch:
        batch.drop_column("managed_by")
