"""Write-back: ``write_run_updates`` of the SQL run store.

A batch of outcomes is one set-based UPDATE per 1000 runs (``run_bulk``) in
one transaction. A node's updates are fenced on its node id: a run taken
from it (by a sweeper, a takeover) keeps the outcome its new holder writes.
Runs it makes succeeded whose job others depend on go to the success hook in
the same transaction (``cronman.store.triggers``); the final updates of runs
whose job counts them (``RunUpdate.counted_job``) are written one by one,
only over rows still in flight, and counted (``cronman.store.run_policies``).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import exists, select, update
from sqlalchemy.sql.elements import ColumnElement

from cronman.models import RunUpdate
from cronman.store.codec import merge_updates
from cronman.store.engine import Database, Tx
from cronman.store.run_bulk import UPDATE_COLUMNS, update_runs
from cronman.store.run_policies import RunEnd, count_ends, counted
from cronman.store.tables import scheduled_jobs as sj
from cronman.store.tables import work_items
from cronman.store.triggers import SucceededRun, SuccessHook
from cronman.vocabulary import IN_FLIGHT_STATUSES


class RunResults:
    """``write_run_updates`` (mixed into ``SqlRunStore``, which sets ``_db``
    and ``_on_succeeded``)."""

    _db: Database
    _on_succeeded: SuccessHook | None

    def write_run_updates(self, updates: Sequence[RunUpdate],
                          node_id: str | None = None) -> None:
        """See ``RunStore.write_run_updates``."""
        if not updates:
            return
        merged = merge_updates(list(updates))
        ending = [u for u in merged if u.counted_job is not None and counted(u.status)]
        rest = [u for u in merged if u.counted_job is None or not counted(u.status)]
        plain = [u for u in rest if not u.extra]
        extra = [u for u in rest if u.extra]

        hook = self._on_succeeded

        def fn(tx: Tx) -> None:
            succeeded: list[SucceededRun] = []
            if plain:
                succeeded += update_runs(tx, plain, node_id, hook is not None)
            for u in extra:
                succeeded += _write_with_extra(tx, u, node_id, hook is not None)
            ends: list[RunEnd] = []
            for u in ending:
                row = _write_ending(tx, u, node_id)
                if row is not None:
                    ends.append(RunEnd(row.job_id, u.scheduled_for, u.status, u.error))
                    if u.status == "succeeded":
                        succeeded.append(row)
            if ends:
                count_ends(tx, ends)
            if succeeded and hook is not None:
                hook(tx, succeeded)

        self._db.write(fn)


def _write_with_extra(tx: Tx, u: RunUpdate, node_id: str | None,
                      want_successes: bool) -> list[SucceededRun]:
    """One update that also sets other columns (rare): its own UPDATE, not
    fenced when it sets ``node_id`` itself -- but never over a run that is
    with a work queue (its queue writes its status: ``work_queue``)."""
    stmt = update(sj).where(*_where(u, node_id)).values(**_values(u))
    if want_successes and u.status == "succeeded":
        return [SucceededRun(*row) for row in tx.conn.execute(stmt.returning(
            sj.c.id, sj.c.job_id, sj.c.scheduled_for, sj.c.attempt))]
    tx.conn.execute(stmt)
    return []


def _values(u: RunUpdate) -> dict[str, object]:
    values = {name: getattr(u, name) for name in UPDATE_COLUMNS[2:]
              if getattr(u, name) is not None or name in ("result", "error")}
    values.update(u.extra)
    return values


def _where(u: RunUpdate, node_id: str | None) -> list[ColumnElement[bool]]:
    where = [sj.c.id == u.id, sj.c.scheduled_for == u.scheduled_for]
    if node_id is not None and "node_id" not in u.extra:
        where.append(sj.c.node_id == node_id)
    if "node_id" in u.extra:  # unfenced: kept off the runs a work queue holds
        where.append(~exists(select(work_items.c.run_id)
                             .where(work_items.c.run_id == u.id)))
    return where


def _write_ending(tx: Tx, u: RunUpdate, node_id: str | None) -> SucceededRun | None:
    """A counted run's final update, written only over a row still in flight:
    the run as it now reads when this write ended it, else None."""
    stmt = (update(sj).where(*_where(u, node_id), sj.c.status.in_(IN_FLIGHT_STATUSES))
            .values(**_values(u))
            .returning(sj.c.id, sj.c.job_id, sj.c.scheduled_for, sj.c.attempt))
    row = tx.conn.execute(stmt).first()
    return None if row is None else SucceededRun(*row)
