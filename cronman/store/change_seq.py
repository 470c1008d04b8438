"""``change_seq``: the jobs' change counter, the watermark of the change-feed pollers.

A poller uses the largest change_seq it has seen as its watermark, so it
must never see a change_seq while a smaller one can still commit (a plain
sequence could commit 11 before 10, and a poller at watermark 11 would never
see 10). On PostgreSQL every write that bumps ``change_seq`` first takes one
cluster-wide transaction-level advisory lock in *shared* mode and only then
draws from the ``jobs_change_seq`` sequence; the lock is released after its
commit is visible. The watermark reads (``jobs_changed_since``,
``current_change_seq``) take the same lock in *exclusive* mode before their
SELECT: that waits until every writer that may hold a drawn value has
committed or rolled back (and holds new writers off until the read's
snapshot is taken), so every change_seq up to the largest the read sees is
final. Writers do not wait for one another (their commits overlap); the
scheduler's cursor updates (``claim_runs``) do not bump change_seq and take
no such lock.

On SQLite, change_seq is max + 1 inside a ``BEGIN IMMEDIATE`` transaction.
``purge_tombstones`` never removes the row holding the largest change_seq,
so max + 1 never reuses a value a poller has already seen.
"""

from __future__ import annotations

from sqlalchemy import func, select, text
from sqlalchemy.engine import Connection

from cronman.store.dialect import POSTGRESQL
from cronman.store.engine import Tx
from cronman.store.tables import jobs

# Advisory lock key guarding change_seq allocation ("cmjobs"): writers shared,
# watermark readers exclusive.
CHANGE_SEQ_LOCK_KEY = 0x636D_6A6F_6273
WRITER_LOCK_SQL = f"SELECT pg_advisory_xact_lock_shared({CHANGE_SEQ_LOCK_KEY})"
_READER_LOCK = text(f"SELECT pg_advisory_xact_lock({CHANGE_SEQ_LOCK_KEY})")
_DRAW = text("SELECT nextval('jobs_change_seq') FROM generate_series(1, :n)")


def next_change_seqs(tx: Tx, n: int) -> list[int]:
    """``n`` new change_seq values, ascending (PostgreSQL: after the writer lock)."""
    conn = tx.conn
    if tx.dialect == POSTGRESQL:
        conn.exec_driver_sql(WRITER_LOCK_SQL)
        return sorted(conn.execute(_DRAW, {"n": n}).scalars().all())
    top = conn.execute(select(func.coalesce(func.max(jobs.c.change_seq), 0))).scalar_one()
    return list(range(top + 1, top + n + 1))


def settle_writers(conn: Connection) -> None:
    """Before a watermark read: wait out the writers holding drawn change_seqs
    (nothing to wait for on SQLite, whose writers are serialised)."""
    if conn.dialect.name == POSTGRESQL:
        conn.execute(_READER_LOCK)
