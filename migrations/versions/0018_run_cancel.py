"""An operator's cancel of a run its node stops (a container run).

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-03 09:00:00

``scheduled_jobs.cancel_request`` is set by ``POST /v1/runs/{id}/cancel``,
in the statement that finds the run in flight: who asked, why and when
(``{"by", "reason", "at", "attempt"}``). The node holding the run reads it at
its next lease renewal and stops the run's container; a replay clears it. A
nullable column: no rewrite of the table.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def _json() -> sa.types.TypeEngine[object]:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.add_column("scheduled_jobs", sa.Column("cancel_request", _json(), nullable=True))


def downgrade() -> None:
    # Not a batch: on SQLite that would copy the table and lose its triggers (0016).
    op.drop_column("scheduled_jobs", "cancel_request")
