"""Work items of http targets with ``"completion": "callback"``.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02 02:30:00

``work_items.kind`` says whose item it is: ``worker`` (a worker target's,
queued for a worker to claim) or ``http`` (an http target's, held from the
start by its receiver, which completes it through the API; never queued).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("work_items", sa.Column("kind", sa.String(16), nullable=False,
                                          server_default=sa.text("'worker'")))


def downgrade() -> None:
    with op.batch_alter_table("work_items") as batch:
        batch.drop_column("kind")
