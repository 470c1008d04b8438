"""RunStore on SQLAlchemy Core: the hot path of the scheduler and the run history.

``SqlRunStore`` is put together from one part per concern:

- ``run_claims``: the fence (``claim_runs``: run rows inserted, job cursors advanced);
- ``run_results``: write-back of outcomes (``write_run_updates``, fenced on the node);
- ``run_leases``: lease renewal, starting claimed runs, and the takers of
  requested and expired runs (``FOR UPDATE SKIP LOCKED`` on PostgreSQL);
- ``run_cancels``: an operator's cancel of a run its node stops, and its
  node's read of them;
- ``run_reads``: reads by run id and by job;
- ``run_requests``: runs the API asks for (trigger, replay, backfill);
- ``run_search``: the operator's searches and statistics across jobs.

Their batch statements, where PostgreSQL and SQLite differ, are ``run_bulk``.
Each call is one transaction. Every statement that targets known runs
carries their ``scheduled_for`` (read back from the run id where needed) so
PostgreSQL prunes the daily partitions at plan time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import date

from cronman.store.engine import Database
from cronman.store.run_cancels import RunCancels
from cronman.store.run_claims import RunClaims
from cronman.store.run_leases import RunLeases
from cronman.store.run_reads import RunReads
from cronman.store.run_requests import RunRequests
from cronman.store.run_results import RunResults
from cronman.store.run_search import RunQueries
from cronman.store.triggers import SuccessHook


class SqlRunStore(RunClaims, RunResults, RunLeases, RunCancels, RunReads, RunRequests,
                  RunQueries):
    """Runs: the fence, the write-back of results, leases, and the history."""

    def __init__(self, db: Database,
                 prepare_days: Callable[[Iterable[date]], object] | None = None,
                 on_succeeded: SuccessHook | None = None) -> None:
        self._db = db
        # Called before a backfill stores runs: creates missing daily partitions.
        self._prepare_days = prepare_days
        # Called in the transaction of a write that made runs of upstream jobs
        # succeed (cronman.store.triggers: announcements, ``after`` runs).
        self._on_succeeded = on_succeeded
