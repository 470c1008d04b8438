"""The Store contract: what the API and the scheduler may ask of the database.

One SQLAlchemy implementation serves PostgreSQL and SQLite (``sql_jobs``,
``sql_runs``, ``tokens`` in this package); what differs between them sits
behind two smaller seams: the change feed (NOTIFY vs. an in-process event) and partition upkeep
(daily partitions vs. nothing to do).

Every method is one transaction (one commit) unless it says otherwise.
Database failures surface as ``cronman.errors.StoreUnavailable``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from cronman.limits import Limit, Quota
from cronman.models import (
    Job,
    JobFilter,
    JobRow,
    Page,
    Run,
    RunFilter,
    RunSearch,
    RunStatsBucket,
    RunStatsQuery,
    RunUpdate,
)
from cronman.schedules import parse_calendar
from cronman.schedules.calendars import ExclusionCalendar
from cronman.signing_keys import KeyState
from cronman.store.records import AttemptOutcome, ChangeContext, KeyRecord, Member, TokenActor
from cronman.store.work_records import (
    Claim,
    ExpiryReport,
    HeartbeatAck,
    QueueStats,
    WorkItem,
    WorkOrder,
)


class JobStore(Protocol):
    def create_jobs(self, specs: Sequence[dict[str, Any]],
                    change: ChangeContext | None = None) -> list[Job]:
        """Insert validated job specs (all or nothing) and announce them.

        Job references in ``depends_on`` and ``after`` schedules are ids;
        the job graph is kept in the same transaction (``cronman.store.dag``):
        an upstream that is no live job, or a cycle, is a ``ValidationError``
        naming the reference. So for ``update_job``.

        Each spec holds the normalised fields of ``Job`` except id, version
        and times. Raises ``Conflict`` (field ``name``, or ``jobs[i].name``
        for more than one spec) when a name is taken in its namespace, and
        ``QuotaExceeded`` (field ``namespace``) when the jobs would take a
        namespace past its quota's ``max_jobs``: checked in the insert's
        transaction under a lock per namespace, so concurrent creates (from
        any number of API processes) never pass it together.
        With ``change``, each job's creation is recorded in its history
        (``cronman.store.history``) in the same transaction; so for every
        write below that takes one.
        """

    def get_job(self, job_id: str) -> Job | None:
        """The live job, or None (deleted jobs are not returned)."""

    def list_jobs(self, flt: JobFilter, limit: int, cursor: str | None) -> Page:
        """Live jobs in id order; the cursor is opaque and stays correct while
        jobs are inserted or deleted (keyset pagination)."""

    def update_job(self, job_id: str, changes: dict[str, Any], *,
                   expected_version: int | None = None,
                   change: ChangeContext | None = None) -> Job:
        """Apply already-validated field changes (only those), bump ``version``
        and ``change_seq``, and announce. With ``expected_version``, only if the
        job is still at that version, checked by the write itself. ``change``
        says who changed it (recorded in the job's history, in the same
        transaction). Raises ``NotFound``/``Conflict`` (field ``version`` for
        a stale version)."""

    def delete_job(self, job_id: str, change: ChangeContext | None = None, *,
                   force: bool = False) -> bool:
        """Soft-delete (tombstone) and announce; False if there was no such job.
        A job other live jobs depend on (``depends_on``, ``after``) is refused
        with ``Conflict`` naming them, unless ``force``."""

    def iter_live_jobs(self, batch_size: int = 10_000) -> Iterator[list[Job]]:
        """Every live job, in batches."""

    def iter_live_job_rows(self, batch_size: int = 10_000) -> Iterator[list[JobRow]]:
        """Every live job, in batches of lean rows (a node's initial sync)."""

    def live_job_rows(self, job_ids: Sequence[str]) -> list[JobRow]:
        """The live ones of the listed jobs as lean rows (a node's reloads)."""

    def live_job_states(self, job_ids: Sequence[str]
                        ) -> dict[str, tuple[int, bool, int | None, int]]:
        """(version, paused, last_fire_at in Unix ms, skipped_pending) of the live listed jobs."""

    def jobs_changed_since(self, change_seq: int, limit: int = 10_000) -> list[Job]:
        """Jobs (tombstones included) whose change_seq is greater, ascending."""

    def count_live_jobs(self) -> int:
        """How many jobs are live (the API's job gauge)."""

    def current_change_seq(self) -> int:
        """The largest change_seq written so far (0 for none): where a node's
        polling starts after its first load."""

    def get_jobs(self, job_ids: Sequence[str]) -> list[Job]:
        """The listed jobs, tombstones included (deleted_at set)."""

    def search_jobs(self, flt: JobFilter, limit: int, cursor: str | None) -> Page:
        """Live jobs in (namespace, name) order -- the operator's list -- with
        ``list_jobs``'s filters (``name`` and ``name_prefix`` are case-sensitive); keyset
        pagination on (namespace, name), which is unique among live jobs."""


class Fenced(set[str]):
    """The run ids a claim inserted (only those may be dispatched), and in
    ``too_early`` those the database refused: their fire time was further
    ahead of its clock than the claim allowed."""

    def __init__(self, inserted: Iterable[str] = (), too_early: Iterable[str] = ()) -> None:
        super().__init__(inserted)
        self.too_early = frozenset(too_early)


class RunStore(Protocol):
    def claim_runs(
        self, runs: Sequence[Run], cursors: Sequence[tuple[str, datetime, int]] = (), *,
        max_ahead_ms: int | None = None,
    ) -> Fenced:
        """The fence: insert run rows (ON CONFLICT (job_id, scheduled_for) DO
        NOTHING) and return the ids actually inserted; only those may be
        dispatched. ``cursors`` advance ``jobs.last_fire_at`` (never backwards)
        and set ``skipped_pending`` per (job id, fire time, skipped) in the
        same transaction. With ``max_ahead_ms``, rows (and cursors) whose
        fire time is further ahead of the database's clock than that are
        refused (SPEC §6: no node's clock fires a job early); on SQLite, which
        runs in this process, the host's clock is the database's."""

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

    def hold_for_attempt(self, node_id: str, key: tuple[str, datetime], attempt: int,
                         until: datetime) -> bool:
        """Before the node sends ``attempt`` of a run it holds (a retry, or a
        run it took over): extend its lease to ``until`` and record that
        attempt as the run's latest, in one statement; False when the node
        no longer holds the run in flight (another took it). A sweeper that
        takes the run later carries on with the attempt after this one,
        whether or not its outcome was written."""

    def request_cancel(self, run_id: str, request: dict[str, Any]) -> Run | None:
        """Record an operator's cancel (``{"by", "reason", "at", "attempt"}``)
        on the run, in the statement that finds it in flight (``claimed``,
        ``running``, ``retrying``); returns the run, or None when it is not in
        flight (ended, or no such run). Asking again replaces the request.
        Only the run's holder acts on it (``cancel_requests``)."""

    def cancel_request(self, run_id: str) -> dict[str, Any] | None:
        """The cancel recorded on the run (``request_cancel``), if any."""

    def cancel_requests(self, keys: Sequence[tuple[str, datetime]]
                        ) -> dict[str, dict[str, Any]]:
        """The cancels recorded on those of the runs (id, scheduled_for) still
        in flight, by run id: read by the node holding them at its lease
        renewal."""

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
        dispatching it. Without ``holder`` (a takeover, going by a fire's
        lock) only runs the schedule claimed (origin ``schedule``) change: a
        requested run (trigger, backfill, upstream) at the same time is its
        taker's, whatever the lock says."""

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

    def earlier_attempts(self, run_id: str) -> list[AttemptOutcome]:
        """The outcomes of the run's attempts before its latest, oldest first
        (the last ``ATTEMPTS_KEPT`` of migration 0016); [] for no such run."""

    def get_runs(self, run_ids: Sequence[str]) -> dict[str, Run]:
        """The runs of these ids that exist, by id (ids of no run left out)."""

    def list_runs(self, job_id: str, flt: RunFilter, limit: int, cursor: str | None) -> Page:
        """A job's runs, newest scheduled_for first."""

    def last_runs(self, job_ids: Sequence[str]) -> dict[str, Run]:
        """The newest run of each listed job that has one."""

    def in_flight_runs(self, job_ids: Sequence[str]) -> dict[str, list[Run]]:
        """Runs still claimed/running/retrying, per job (concurrency policies)."""

    def count_buffered(self, job_id: str) -> int:
        """How many fires of the job a buffer holds (``buffer_one``, ``buffer_all``):
        ``claimed`` rows whose error starts with ``vocabulary.BUFFERED_PREFIX``."""

    def request_trigger(self, job: Job, at: datetime,
                        change: ChangeContext | None = None) -> Run:
        """Store a manual fire of ``job`` at ``at`` for a scheduler to carry out."""

    def request_replay(self, run_id: str, change: ChangeContext | None = None) -> Run:
        """Put a finished run back in flight as a new attempt. Raises
        ``NotFound``, or ``Conflict`` when the run is still in flight."""

    def request_backfill(self, job: Job, fire_times: Sequence[datetime],
                         change: ChangeContext | None = None) -> list[str]:
        """Store runs for the fire times that have none yet; returns their ids
        (in fire-time order)."""

    def search_runs(self, query: RunSearch, limit: int, cursor: str | None) -> Page:
        """Runs across jobs, newest ``scheduled_for`` first (ties: newest id
        first); ``since`` inclusive, ``until`` exclusive. Every statement
        bounds ``scheduled_for`` (PostgreSQL prunes to the window's
        partitions) and walks the window newest day first, so a page costs
        the days it reads, not the whole history."""

    def run_stats(self, query: RunStatsQuery) -> list[RunStatsBucket]:
        """Per step of the window: fires, failures and lateness p50/p99 (see
        ``RunStatsBucket``); only steps holding runs are returned, oldest first."""


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
# Announced with a job id appended when runs of that job succeed and other
# jobs' fires wait for it (``depends_on``): they look again at once.
UPSTREAM_SUCCEEDED = "*ok:"
# Announced when an exclusion calendar is created, changed or deleted.
CALENDARS_CHANGED = "*calendars"


@dataclass
class MaintenanceReport:
    """What one maintenance pass did (``ran`` False: another process held the lock)."""

    ran: bool
    created: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    expired_rows: int = 0
    purged_tombstones: int = 0


class PartitionManager(Protocol):
    def ensure_partitions(self, today: datetime, days_ahead: int) -> list[str]:
        """Create missing daily partitions from ``today`` on; return their names."""

    def drop_expired(self, today: datetime, retention_days: int) -> list[str]:
        """Drop partitions wholly older than the retention; return their names."""

    def run_maintenance(self, today: datetime, days_ahead: int,
                        retention_days: int) -> MaintenanceReport:
        """Both of the above, by one process at a time (a database lock)."""


class TokenStore(Protocol):
    """API tokens. Creating and revoking record who did it (``actor``; by
    default someone with database access) in the token history, in the
    transaction of the change."""

    def create_token(self, name: str, namespaces: Sequence[str] | None, *,
                     read_only: bool = False, actor: TokenActor = ...) -> tuple[str, dict[str, Any]]:
        """A new token: the secret (shown once) and its record. ``None`` = admin;
        ``read_only``: the token may read, never change anything."""

    def find_token(self, secret: str) -> dict[str, Any] | None: ...

    def any_token_created(self) -> bool:
        """Whether any token was ever created (revoked ones count)."""

    def get_token(self, token_id: str) -> dict[str, Any] | None:
        """A token by id, revoked or not; None when unknown."""

    def list_tokens(self) -> list[dict[str, Any]]: ...

    def list_token_page(self, limit: int, cursor: str | None = None) -> Page:
        """Tokens oldest first, a page at a time."""

    def revoke_token(self, token_id: str, *, actor: TokenActor = ...) -> bool:
        """False when no live token has this id (nothing is recorded then)."""

    def token_history(self, token_id: str) -> list[dict[str, Any]]:
        """A token's recorded changes, oldest first."""


class JobHistory(Protocol):
    def list_history(self, job_id: str, limit: int, cursor: str | None) -> Page:
        """A job's recorded changes (``HistoryEntry``), newest first; a deleted
        job's history included."""

    def job_namespace(self, job_id: str) -> str | None:
        """The namespace of the job's latest recorded change (None: none)."""


class DependencyStore(Protocol):
    """The job graph and the upstream runs a fire depends on."""

    def fresh_upstream_runs(self, windows: Sequence[tuple[str, datetime, datetime]]
                            ) -> dict[str, Run]:
        """Per (upstream job id, since, until): its latest ``succeeded`` run
        scheduled in [since, until], by job id (jobs without one left out)."""

    def edges(self, job_id: str) -> tuple[list[Edge], list[Edge]]:
        """(upstream, downstream) of a job: the jobs it depends on or is fired
        after, and the live jobs that depend on it or are fired after it."""

    def find_jobs(self, refs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], Job]:
        """Live jobs by (namespace, name)."""


class CalendarStore(Protocol):
    """Named exclusion calendars (``/v1/calendars``)."""

    def all_calendars(self) -> list[CalendarRecord]:
        """Every calendar (a scheduler node holds them all)."""

    def fingerprint(self) -> tuple[int, datetime | None]:
        """(count, latest change): changes when any calendar is made, changed
        or deleted (what a node compares before it reads them all again)."""


class SigningKeyStore(Protocol):
    """Each namespace's signing key generation (``cronman.signing_keys``)."""

    def all_states(self) -> list[KeyState]:
        """Every namespace ever rotated (a node signs for all of them)."""

    def state(self, namespace: str) -> KeyState: ...

    def rotate(self, namespace: str, *, now: datetime, previous_until: datetime) -> KeyState:
        """The next generation signs from now, the current one until ``previous_until``."""


@dataclass(frozen=True, slots=True)
class Edge:
    """One edge of the job graph, seen from one end: the job at the other end
    (None fields when it was deleted) and how they are linked."""

    job_id: str
    kind: str
    namespace: str | None
    name: str | None
    deleted: bool


@dataclass(frozen=True, slots=True)
class CalendarRecord:
    """A stored exclusion calendar."""

    id: str
    namespace: str
    name: str
    timezone: str
    dates: list[str]
    version: int
    created_at: datetime
    updated_at: datetime

    def calendar(self) -> ExclusionCalendar:
        """The pure model of this calendar (its dates were validated when stored)."""
        return parse_calendar({"name": self.name, "timezone": self.timezone,
                               "dates": self.dates}, path="")


class HostPolicies(Protocol):
    """The namespaces' host policy grants (``cronman.host_policy``)."""

    def get(self, namespace: str) -> dict[str, Any] | None:
        """The keys the namespace's grant sets (``host_policy.over`` reads them
        over the operator's default); None: the default applies."""

    def put(self, namespace: str, grant: Mapping[str, Any], *, by: str | None) -> None:
        """Set the grant: only the keys given (``host_policy.grant_keys``)."""

    def delete(self, namespace: str) -> bool: ...


class WorkQueueStore(Protocol):
    """The work queues of ``worker`` targets (``cronman.store.work_queue``).

    A run is with its queue from ``enqueue`` until a call here writes its
    final status (in the same transaction the item goes). Every transition
    is conditional on the item still being there in the state, and under
    the lease token, it was read with: two callers never both move one item.
    """

    def enqueue(self, order: WorkOrder) -> bool:
        """Hand the run to its queue: the item is stored and the run row
        becomes ``running`` with no node, if the row is still held by
        ``order.node_id``. Idempotent on the run id (a run whose item is
        there already is not queued twice: True). False when the row is
        not (yet) the node's; nothing changes then."""

    def hold(self, order: WorkOrder, holder: str, token: str, *, first_lease: int) -> bool:
        """An http target's attempt with ``"completion": "callback"``, before
        its request goes: the item is stored held by ``holder`` (``http:<host>``)
        under ``token`` (its hash) for ``first_lease`` seconds, with its
        deadline ``order.timeout`` seconds away, and the run row becomes
        ``running`` with no node, if ``order.node_id`` still holds it (else
        False, nothing changed). From then on the receiver's heartbeats and
        completion go as a worker's."""

    def release(self, run_id: str, scheduled_for: datetime, token: str, *, node_id: str,
                lease_until: datetime) -> bool:
        """The request's answer was not a 202: the held item goes and the run
        row is ``node_id``'s again (its lease until ``lease_until``), for the
        node to record the attempt as any other. False when the item is no
        longer held under ``token`` (the receiver completed, or the lease
        ran out): the queue has the run, nothing changed."""

    def claim(self, namespace: str, queue: str, worker_id: str, *, slots: int,
              now: datetime, seen: bool = True) -> Claim | None:
        """Record the worker as seen, and hand it the queue's next claimable
        item (highest priority, then earliest available; only items whose
        capacity rule holds), under a fresh lease. None: nothing to claim.
        ``seen`` False (a long-poll looking again): the worker is not recorded
        again, and nothing is written when nothing is claimable."""

    def claim_many(self, namespace: str, queue: str, worker_id: str, *, slots: int,
                   now: datetime, seen: bool = True, limit: int = 1) -> list[Claim]:
        """As ``claim``, up to ``limit`` items at once (in claim order, each under
        a lease token of its own) in one transaction; empty: nothing to claim."""

    def heartbeat(self, run_id: str, token: str, *, progress: str | None,
                  percent: float | None, now: datetime,
                  output: dict[str, Any] | None = None,
                  namespaces: Collection[str] | None = None) -> HeartbeatAck:
        """Renew the lease (one statement, no read before it), for ``now`` plus
        the run's heartbeat timeout, counting the heartbeat; ``progress``,
        ``percent`` and ``output`` (the tails of stdout and stderr so far)
        replace the item's when given. ``StaleLease`` when the token is not the
        run's current lease, or the run's queue is in none of ``namespaces``
        (None: any); ``NotFound`` when there is no such run. The worker's row
        is recorded as seen at most every few seconds."""

    def complete(self, run_id: str, token: str, *, status: str,
                 result: dict[str, Any] | None, error: str | None, now: datetime) -> Run:
        """The worker's report: the run's final status, or (a failed attempt
        with retries left) its next attempt queued after the retry backoff.
        ``StaleLease`` / ``NotFound`` as for ``heartbeat``."""

    def cancel(self, run_id: str, reason: str | None, *, now: datetime) -> WorkItem | None:
        """A queued item ends at once (``failed``, ``cancelled: <reason>``); a
        held one gets ``cancel_requested``. Returns the item as it was, None
        when the run is not with a queue."""

    def expire(self, now: datetime, limit: int = 100) -> ExpiryReport:
        """End what ran out: leases past their end (re-queued as a new
        attempt, or ``lost``, per the run's delivery; ``failed`` when
        cancelled), attempts past their timeout, queued items past their
        capacity wait. Safe to run on several nodes at once."""

    def take_ended(self, limit: int = 100) -> list[Run]:
        """Runs that ended ``failed`` or ``lost`` through their queue and whose
        job has a dead letter, each handed to one caller once (to send it)."""

    def namespace_of(self, run_id: str) -> str | None:
        """The namespace of the run's queue while the run is with it (one key
        lookup: what a worker's calls are authorised by); None otherwise."""

    def items(self, run_ids: Sequence[str], *, now: datetime) -> dict[str, WorkItem]:
        """The items of these runs that are with a queue, by run id."""

    def queues(self, namespaces: Sequence[str] | None, *, now: datetime,
               limit: int = 1000, after: tuple[str, str] | None = None) -> list[QueueStats]:
        """Each queue's figures in (namespace, queue) order (``namespaces``
        None: every namespace), after ``after`` (a keyset cursor)."""

    def waiting(self, namespace: str, queue: str) -> AbstractContextManager[WorkWaiter]:
        """Wait for work on the queue within the block (a long-poll's claim,
        entered before its first look). Each run enqueued from then on wakes
        one waiter of the queue per process, not all of them."""


class WorkWaiter(Protocol):
    """A claim waiting on its queue (``WorkQueueStore.waiting``)."""

    def wait(self, timeout: float) -> bool:
        """Until a run is announced for this waiter (True), or a short poll
        interval (at most ``timeout``) passed."""


class LimitStore(Protocol):
    """Named limits and namespace quotas (``cronman.limits``)."""

    def list_limits(self) -> list[Limit]: ...

    def get_limit(self, name: str) -> Limit | None: ...

    def create_limit(self, limit: Limit, *, by: str | None) -> Limit:
        """``Conflict`` naming ``name`` when one of that name exists."""

    def update_limit(self, limit: Limit, *, version: int | None, by: str | None) -> Limit:
        """Replace it; ``version``: the one read (``Conflict`` when stale, None: any)."""

    def delete_limit(self, name: str) -> bool: ...

    def get_quota(self, namespace: str) -> Quota | None: ...

    def list_quotas(self) -> list[Quota]: ...

    def put_quota(self, quota: Quota, *, by: str | None) -> Quota: ...

    def delete_quota(self, namespace: str) -> bool: ...

    def all_limits(self) -> list[Limit]:
        """Every limit, and every quota that bounds fires as a limit (a node's read)."""

    def waiting_counts(self) -> dict[str, int]:
        """Per limit name, the attempts waiting on it now (from their runs'
        ``gate``: the nodes write it when an attempt starts to wait)."""

    def labelled_jobs(self, labels: list[str]) -> dict[str, frozenset[str]]:
        """Per label (``key:value``), the ids of the live jobs that carry it."""


class IdempotencyKeys(Protocol):
    """The first answers of keyed calls (``Idempotency-Key``), per caller (``scope``)."""

    def claim(self, scope: str, key: str, request_hash: str, now: datetime,
              expires_at: datetime, stale_before: datetime) -> KeyRecord | None:
        """Take ``key`` for a new call (None), or the record it holds already
        (a key past its ``expires_at`` is taken anew, one held without an
        answer since before ``stale_before`` for the same request taken over)."""

    def keep(self, scope: str, key: str, status_code: int, body: str) -> None:
        """Keep the answer of the call that holds ``key``."""

    def release(self, scope: str, key: str) -> None:
        """Give back a key whose call ended without an answer to keep."""

    def purge(self, now: datetime) -> int:
        """Delete the keys expired by ``now``; how many."""


class Store(Protocol):
    """One database: its jobs, runs, tokens and partitions, and its change feed."""

    @property
    def jobs(self) -> JobStore: ...

    @property
    def runs(self) -> RunStore: ...

    @property
    def tokens(self) -> TokenStore: ...

    @property
    def partitions(self) -> PartitionManager: ...

    @property
    def history(self) -> JobHistory: ...

    @property
    def dependencies(self) -> DependencyStore: ...

    @property
    def calendars(self) -> CalendarStore: ...

    @property
    def signing_keys(self) -> SigningKeyStore: ...

    @property
    def host_policies(self) -> HostPolicies: ...

    @property
    def work(self) -> WorkQueueStore: ...

    @property
    def limits(self) -> LimitStore: ...

    @property
    def idempotency(self) -> IdempotencyKeys: ...

    def feed(self) -> ChangeFeed:
        """A new subscription to announcements, for one consumer (close it when done)."""

    def ping(self) -> bool:
        """Readiness: True when the database answers. Never raises."""

    def server_time_ms(self) -> int | None:
        """The database server's clock (Unix ms), for nodes to check theirs
        against while Redis is away; None when the database has no clock of
        its own (SQLite). Raises ``StoreUnavailable``."""

    def database_member(self) -> Member | None:
        """The member (host:port) this process's newest connection landed on and
        since when: under Patroni, the primary written to. None for SQLite, or
        before the first connection."""

    def close(self) -> None: ...
