"""The fence: ``claim_runs`` of the SQL run store.

A batch of due fires becomes one ``INSERT ... ON CONFLICT DO NOTHING
RETURNING id`` per 1000 runs plus one cursor UPDATE, in one transaction:
the run row's uniqueness on (job_id, scheduled_for) decides which node owns
a fire, and only the rows a node inserted are its to dispatch.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from cronman.models import Run
from cronman.store.base import Fenced
from cronman.store.engine import Database, Tx
from cronman.store.run_bulk import advance_cursors, insert_runs
from cronman.timeutil import from_ms


class RunClaims:
    """``claim_runs`` (mixed into ``SqlRunStore``, which sets ``_db``)."""

    _db: Database

    def claim_runs(
        self, runs: Sequence[Run], cursors: Sequence[tuple[str, datetime, int]] = (), *,
        max_ahead_ms: int | None = None,
    ) -> Fenced:
        """See ``RunStore.claim_runs``."""
        if not runs and not cursors:
            return Fenced()

        def fn(tx: Tx) -> Fenced:
            keep, advance, early = runs, cursors, set[str]()
            if max_ahead_ms is not None:
                limit = from_ms(tx.now_ms() + max_ahead_ms)
                keep = [r for r in runs if r.scheduled_for <= limit]
                early = {r.id for r in runs if r.scheduled_for > limit}
                advance = [c for c in cursors if c[1] <= limit]
            inserted = insert_runs(tx, keep) if keep else set()
            if advance:
                advance_cursors(tx, _latest_per_job(advance))
            return Fenced(inserted, early)

        return self._db.write(fn)


def _latest_per_job(cursors: Sequence[tuple[str, datetime, int]]
                    ) -> list[tuple[str, tuple[datetime, int]]]:
    """Each job's latest (fire time, skipped) of ``cursors``, by job id."""
    latest: dict[str, tuple[datetime, int]] = {}
    for job_id, fire_time, skipped in cursors:
        prev = latest.get(job_id)
        if prev is None or fire_time >= prev[0]:
            latest[job_id] = (fire_time, skipped)
    return sorted(latest.items())
