"""The notification outbox's batch statements, where PostgreSQL and SQLite differ.

PostgreSQL gets one statement per ``CHUNK`` rows, with the ``VALUES`` list
rendered by psycopg2 (``cronman.store.pgsql``) or the keys as arrays; SQLite,
which has no network round trip, gets an executemany or plain reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, select, text, update
from sqlalchemy.engine import Connection

from cronman.outbox.records import FinishedRun
from cronman.store.dialect import POSTGRESQL
from cronman.store.engine import Tx
from cronman.store.pgsql import execute_rendered, render_literal, render_values
from cronman.store.tables import notification_events, scheduled_jobs
from cronman.vocabulary import RunStatus

sj = scheduled_jobs
ne = notification_events
CHUNK = 500
# The columns of a FinishedRun, in its order.
RUN_COLUMNS = (sj.c.id, sj.c.job_id, sj.c.scheduled_for, sj.c.status, sj.c.attempt,
               sj.c.finished_at, sj.c.error, sj.c.node_id)
# Failed/lost runs read by the notifier (the attempt read; a newer one stays unread).
_PG_MARK_READ = """
UPDATE scheduled_jobs AS t SET notified_attempt = v.attempt
FROM (VALUES {values}) AS v(id, scheduled_for, attempt)
WHERE t.id = v.id AND t.scheduled_for = v.scheduled_for AND t.attempt = v.attempt
  AND t.scheduled_for BETWEEN {lo}::timestamptz AND {hi}::timestamptz
"""
_PG_ASSIGN = """
UPDATE notification_events AS t SET notification_id = v.note
FROM (VALUES {values}) AS v(id, note) WHERE t.id = v.id
"""
# Per job, its first success at or after a time: one index probe per job (the
# (job_id, scheduled_for) index, partitions before the time pruned at run time).
_PG_FIRST_SUCCESSES = text("""
SELECT r.* FROM unnest(CAST(:ids AS text[]), CAST(:since AS timestamptz[])) AS j(id, since)
CROSS JOIN LATERAL (
  SELECT s.id, s.job_id, s.scheduled_for, s.status, s.attempt, s.finished_at, s.error,
         s.node_id
  FROM scheduled_jobs s
  WHERE s.job_id = j.id AND s.scheduled_for >= j.since AND s.status = 'succeeded'
  ORDER BY s.scheduled_for LIMIT 1
) AS r
""").columns(*RUN_COLUMNS)
_MARK_READ = (update(sj)
              .where(sj.c.id == bindparam("r_id"), sj.c.scheduled_for == bindparam("r_at"),
                     sj.c.attempt == bindparam("r_attempt"))
              .values(notified_attempt=bindparam("r_attempt")))
_ASSIGN = (update(ne).where(ne.c.id == bindparam("e_id"))
           .values(notification_id=bindparam("e_note")))


def chunks(items: Sequence[Any], size: int = CHUNK) -> list[Sequence[Any]]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def first_successes(conn: Connection, since: Mapping[str, datetime]) -> dict[str, FinishedRun]:
    """Each job's first success at or after its time in ``since`` (the jobs
    with one)."""
    # Chunks of jobs with close times, so each query's range stays narrow.
    order = sorted(since, key=lambda job_id: since[job_id])
    found: dict[str, FinishedRun] = {}
    if conn.dialect.name == POSTGRESQL:
        for chunk in chunks(order):
            rows = conn.execute(_PG_FIRST_SUCCESSES, {
                "ids": list(chunk), "since": [since[j] for j in chunk]})
            found.update((row.job_id, FinishedRun(*row)) for row in rows)
        return found
    for chunk in chunks(order):
        lo = min(since[j] for j in chunk)
        stmt = (select(*RUN_COLUMNS)
                .where(sj.c.job_id.in_(list(chunk)), sj.c.scheduled_for >= lo,
                       sj.c.status == RunStatus.SUCCEEDED.value))
        for row in conn.execute(stmt):
            run = FinishedRun(*row)
            if run.scheduled_for < since[run.job_id]:
                continue
            best = found.get(run.job_id)
            if best is None or run.scheduled_for < best.scheduled_for:
                found[run.job_id] = run
    return found


def mark_read(tx: Tx, runs: Sequence[tuple[str, datetime, int]]) -> None:
    """Set ``notified_attempt`` of each (id, scheduled_for, attempt) run still
    in that attempt."""
    if not runs:
        return
    if tx.dialect == POSTGRESQL:  # one statement per chunk, not one per run
        for chunk in chunks(runs):
            values = render_values(tx.conn, "(%s, %s::timestamptz, %s::int)", chunk)
            lo, hi = min(t for _, t, _ in chunk), max(t for _, t, _ in chunk)
            execute_rendered(tx.conn, _PG_MARK_READ.format(
                values=values, lo=render_literal(tx.conn, lo),
                hi=render_literal(tx.conn, hi)))
        return
    for chunk in chunks(runs):
        tx.conn.execute(_MARK_READ, [{"r_id": i, "r_at": t, "r_attempt": a}
                                     for i, t, a in chunk])


def assign_events(tx: Tx, pairs: Sequence[tuple[int, str]]) -> None:
    """Each stored event (row id) to its message (id)."""
    if tx.dialect == POSTGRESQL:
        for chunk in chunks(pairs):
            values = render_values(tx.conn, "(%s::bigint, %s)", chunk)
            execute_rendered(tx.conn, _PG_ASSIGN.format(values=values))
        return
    tx.conn.execute(_ASSIGN, [{"e_id": i, "e_note": n} for i, n in pairs])
