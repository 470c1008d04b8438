"""Every attempt of a run; a worker run's live output and heartbeat count.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02 05:30:00

``scheduled_jobs.attempts`` holds the outcome of each earlier attempt of a
run (its row keeps the latest one), oldest first, at most
``ATTEMPTS_KEPT``: attempt, status, node, start and end (RFC 3339 text),
duration, result and error. A trigger writes it whenever a row's
``attempt`` goes up from one already made (a retry, a replay, a sweeper's
redispatch, a work queue's next claim), so every writer of run rows keeps
it without knowing of it; a run with one attempt never fires it.

``work_items.output`` is the tail of a worker run's stdout and stderr as its
latest heartbeat reported it, ``work_items.heartbeats`` how many heartbeats
its attempt has had.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

ATTEMPTS_KEPT = 20
_FIRES = "NEW.attempt > OLD.attempt AND OLD.attempt > 0"

_PG_FUNCTION = f"""
CREATE OR REPLACE FUNCTION cronman_keep_attempt() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE kept jsonb;
BEGIN
  kept := COALESCE(OLD.attempts, '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
    'attempt', OLD.attempt, 'status', OLD.status, 'node_id', OLD.node_id,
    'started_at', to_char(OLD.started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
    'finished_at', to_char(OLD.finished_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
    'duration_ms', OLD.duration_ms, 'result', OLD.result, 'error', OLD.error));
  IF jsonb_array_length(kept) > {ATTEMPTS_KEPT} THEN
    kept := kept - 0;
  END IF;
  NEW.attempts := kept;
  RETURN NEW;
END $$
"""
_PG_TRIGGER = f"""
CREATE TRIGGER scheduled_jobs_keep_attempt BEFORE UPDATE OF attempt ON scheduled_jobs
FOR EACH ROW WHEN ({_FIRES}) EXECUTE FUNCTION cronman_keep_attempt()
"""
# SQLite cannot change NEW: the row is updated again after the update (a
# trigger's own UPDATE fires no trigger while recursive triggers are off).
# Its times are UTC text, "YYYY-MM-DD HH:MM:SS.ffffff": kept to the microsecond.
_SQLITE_TRIGGER = f"""
CREATE TRIGGER scheduled_jobs_keep_attempt AFTER UPDATE OF attempt ON scheduled_jobs
FOR EACH ROW WHEN {_FIRES}
BEGIN
  UPDATE scheduled_jobs SET attempts = (
    SELECT CASE WHEN json_array_length(k) > {ATTEMPTS_KEPT} THEN json_remove(k, '$[0]') ELSE k END
    FROM (SELECT json_insert(COALESCE(OLD.attempts, '[]'), '$[#]', json_object(
      'attempt', OLD.attempt, 'status', OLD.status, 'node_id', OLD.node_id,
      'started_at', replace(OLD.started_at, ' ', 'T') || 'Z',
      'finished_at', replace(OLD.finished_at, ' ', 'T') || 'Z',
      'duration_ms', OLD.duration_ms, 'result', json(OLD.result), 'error', OLD.error)) AS k))
  WHERE id = NEW.id AND scheduled_for = NEW.scheduled_for;
END
"""


def _json() -> sa.types.TypeEngine[object]:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.add_column("scheduled_jobs", sa.Column("attempts", _json(), nullable=True))
    op.add_column("work_items", sa.Column("output", _json(), nullable=True))
    op.add_column("work_items", sa.Column("heartbeats", sa.Integer, nullable=False,
                                          server_default=sa.text("0")))
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_PG_FUNCTION)
        op.execute(_PG_TRIGGER)
    else:
        op.execute(_SQLITE_TRIGGER)


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS scheduled_jobs_keep_attempt"
               + (" ON scheduled_jobs" if op.get_bind().dialect.name == "postgresql" else ""))
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS cronman_keep_attempt()")
    with op.batch_alter_table("work_items") as batch:
        batch.drop_column("heartbeats")
        batch.drop_column("output")
    with op.batch_alter_table("scheduled_jobs") as batch:
        batch.drop_column("attempts")
