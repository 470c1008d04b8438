"""The Store contract: what the API and the scheduler may ask of the database.

One SQLAlchemy implementation serves PostgreSQL and SQLite (``sql_jobs``,
``sql_runs``, ``tokens`` in this package); what differs between them sits
behind two smaller seams: the change feed (NOTIFY vs. an in-process event) and partition upkeep
(daily partitions vs. nothing to do).

Every method is one transaction (one commit) unless it says otherwise.
Database failures surface as ``cronman.errors.StoreUnavailable``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any, Protocol

from cronman.models import Job, JobFilter, Page, Run, RunFilter, RunUpdate


class JobStore(Protocol):
    def create_jobs(self, specs: Sequence[dict[str, Any]]) -> list[Job]:
        """Insert validated job specs (all or nothing) and announce them.

        Each spec holds the normalised fields of ``Job`` except id, version
        and times. Raises ``Conflict`` (field ``name``, or ``jobs[i].name``
        for more than one spec) when a name is taken in its namespace.
        """

    def get_job(self, job_id: str) -> Job | None:
        """The live job, or None (deleted jobs are not returned)."""

    def list_jobs(self, flt: JobFilter, limit: int, cursor: str | None) -> Page:
        """Live jobs in id order; the cursor is opaque and stays correct while
        jobs are inserted or deleted (keyset pagination)."""

    def update_job(self, job_id: str, changes: dict[str, Any]) -> Job:
        """Apply already-validated field changes, bump ``version`` and
        ``change_seq``, and announce. Raises ``NotFound``/``Conflict``."""

    def delete_job(self, job_id: str) -> bool:
        """Soft-delete (tombstone) and announce; False if there was no such job."""

    def iter_live_jobs(self, batch_size: int = 10_000) -> Iterator[list[Job]]:
        """Every live job, in batches."""

    def iter_live_job_rows(self, batch_size: int = 10_000) -> Iterator[list[tuple[Any, ...]]]:
        """Every live job, in batches of lean rows (a node's initial sync):
        ``LIVE_ROW_COLUMNS`` in order, the JSON columns as text."""

    def live_job_rows(self, job_ids: Sequence[str]) -> list[tuple[Any, ...]]:
        """The live ones of the listed jobs as lean rows (a node's reloads)."""

    def live_job_states(self, job_ids: Sequence[str]
                        ) -> dict[str, tuple[int, bool, int | None, int]]:
        """(version, paused, last_fire_at in Unix ms, skipped_pending) of the live listed jobs."""

    def jobs_changed_since(self, change_seq: int, limit: int = 10_000) -> list[Job]:
        """Jobs (tombstones included) whose change_seq is greater, ascending."""

    def get_jobs(self, job_ids: Sequence[str]) -> list[Job]:
        """The listed jobs, tombstones included (deleted_at set)."""


class RunStore(Protocol):
    def claim_runs(
        self, runs: Sequence[Run], cursors: Sequence[tuple[str, datetime, int]] = ()
    ) -> set[str]:
        """The fence: insert run rows (ON CONFLICT (job_id, scheduled_for) DO
        NOTHING) and return the ids actually inserted; only those may be
        dispatched. ``cursors`` advance ``jobs.last_fire_at`` (never backwards)
        and set ``skipped_pending`` per (job id, fire time, skipped) in the
        same transaction."""

    def write_run_updates(self, updates: Sequence[RunUpdate],
                          node_id: str | None = None) -> None:
        """Write a batch of run changes in one transaction. With ``node_id``
        (a scheduler node writing its runs), only rows that node holds are
        changed: a run taken from it (swept after its lease expired, taken
        over) keeps what its new holder writes. An update whose ``extra``
        sets ``node_id`` (it makes the row the writer's) is not fenced."""

    def renew_leases(
        self, node_id: str, keys: Sequence[tuple[str, datetime]], until: datetime
    ) -> int:
        """Extend the lease of the node's in-flight runs (id, scheduled_for)."""

    def start_claimed_runs(
        self, node_id: str, keys: Sequence[tuple[str, datetime]], started_at: datetime,
        lease_until: datetime, holder: str | None = None,
    ) -> set[str]:
        """Compare-and-set on claims nobody started: each run (id,
        scheduled_for) still ``claimed``, with no ``started_at`` -- and held by
        ``holder`` when given -- becomes ``running`` on ``node_id``, started at
        ``started_at``, leased until ``lease_until``. Returns the ids changed;
        a run already started, finished or missing is left alone. Lets a node
        that cannot reach the coordinator start its own claim, and a replica
        take over a claim whose holder died before the due time, without both
        dispatching it."""

    def take_requested_runs(self, node_id: str, lease_until: datetime, limit: int) -> list[Run]:
        """Atomically assign to ``node_id`` runs the API requested (trigger,
        replay, backfill: in flight with no node). Never hands a run to two nodes."""

    def take_expired_runs(self, node_id: str, now: datetime, lease_until: datetime,
                          limit: int, spare: Sequence[str] = (),
                          spare_before: datetime | None = None) -> list[Run]:
        """Atomically take over in-flight runs whose lease expired before
        ``now`` (their node died); the caller re-dispatches or marks them lost.
        Runs held by a node in ``spare`` (nodes known to be alive: they write
        their runs' outcomes, late after an outage) are taken only when their
        lease expired before ``spare_before``."""

    def get_run(self, run_id: str) -> Run | None: ...

    def list_runs(self, job_id: str, flt: RunFilter, limit: int, cursor: str | None) -> Page:
        """A job's runs, newest scheduled_for first."""

    def last_runs(self, job_ids: Sequence[str]) -> dict[str, Run]:
        """The newest run of each listed job that has one."""

    def in_flight_runs(self, job_ids: Sequence[str]) -> dict[str, list[Run]]:
        """Runs still claimed/running/retrying, per job (concurrency policies)."""

    def request_trigger(self, job: Job, at: datetime) -> Run:
        """Store a manual fire of ``job`` at ``at`` for a scheduler to carry out."""

    def request_replay(self, run_id: str) -> Run:
        """Put a finished run back in flight as a new attempt. Raises
        ``NotFound``, or ``Conflict`` when the run is still in flight."""

    def request_backfill(self, job: Job, fire_times: Sequence[datetime]) -> int:
        """Store runs for the fire times that have none yet; returns how many."""


class ChangeFeed(Protocol):
    """Announcements of job changes and run requests, for schedulers.

    Delivery is best effort (a node also polls ``jobs_changed_since``);
    ``wait`` returns early when something was announced.
    """

    def wait(self, timeout: float) -> list[str]:
        """Job ids announced since the last call (``RUNS_REQUESTED`` for new
        API-requested runs); an empty list on timeout."""

    def close(self) -> None: ...


RUNS_REQUESTED = "*runs"


class PartitionManager(Protocol):
    def ensure_partitions(self, today: datetime, days_ahead: int) -> list[str]:
        """Create missing daily partitions from ``today`` on; return their names."""

    def drop_expired(self, today: datetime, retention_days: int) -> list[str]:
        """Drop partitions wholly older than the retention; return their names."""

    def run_maintenance(self, today: datetime, days_ahead: int, retention_days: int) -> None:
        """Both of the above, by one process at a time (a database lock)."""


class TokenStore(Protocol):
    def create_token(self, name: str, namespaces: Sequence[str] | None) -> tuple[str, dict[str, Any]]:
        """A new token: the secret (shown once) and its record. ``None`` = admin."""

    def find_token(self, secret: str) -> dict[str, Any] | None: ...

    def any_tokens(self) -> bool: ...

    def list_tokens(self) -> list[dict[str, Any]]: ...

    def revoke_token(self, token_id: str) -> bool: ...
