"""The result writer: run changes leave the node in batches, never lost on a
database outage.

The event loop hands in ``RunUpdate``s (``update``); a flusher task writes them
every ``flush_interval`` (or sooner when ``max_batch`` are waiting) with one
``write_run_updates`` call on a worker thread -- one commit for many runs.
Updates to the same run are merged, so a short run costs one write after its
claim.

Two more kinds of rows wait here while the database is down:

- *claims made without the fence* (the coordinator lock was won, the database
  was down, the run was dispatched): they are inserted through the fence
  (``claim_runs``) before any update. A row that turns out to exist already
  was fired twice: logged, counted in ``cronman_double_fires_total``, and our
  updates for it are dropped (the existing row keeps its own record).
  Claims of fires *taken over* from a replica that never started them are
  the exception: the replica's unstarted row is expected, and becomes ours
  (a row the replica did start is a double fire like any other).
- *fires nobody could claim* (neither database nor coordinator reachable):
  recorded as ``skipped`` rows with an error, through the fence (so a replica
  that did fire keeps its row), some seconds after the database came back so
  that such a replica's own write-through goes first.

A flush the database cannot take (``StoreUnavailable``: unreachable) keeps
what it has not written yet and retries with exponential backoff; rows it
did commit are not written again. Memory is bounded (``max_pending``):
beyond it the least valuable rows go first (records of unclaimable fires,
then intermediate statuses, then the oldest final ones), each counted in
``cronman_results_dropped_total`` and logged.

A row the database *refuses* (any other error: a value out of range, text
it cannot store) never holds the others back: the batch is written in
halves until the refused rows stand alone, the rest is committed, and each
refused row is written once more without its figures and result, its error
saying why (a run is never left ``claimed`` behind a bad neighbour); if even
that is refused it is dropped. Both are logged and counted in
``cronman_run_writes_refused_total`` (``outcome`` cut or dropped).

``health()`` says whether writes are stuck: failing for ``STUCK_AFTER``
seconds in a row (the node's ``/readyz`` answers 503 with it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import Executor
from datetime import datetime, timedelta
from typing import Protocol

from cronman.errors import StoreUnavailable
from cronman.eventloop import Wakeup
from cronman.models import Run, RunUpdate
from cronman.scheduler.fires import Cursor
from cronman.scheduler.record.write_batch import (
    Isolator,
    WriteBatch,
    cut_cursor,
    cut_run,
    cut_update,
    reason_of,
)
from cronman.scheduler.runtime.clock import ReferenceClock
from cronman.scheduler.runtime.lifecycle import Lifecycle
from cronman.scheduler.runtime.metrics import NodeMetrics
from cronman.scheduler.runtime.ratelog import RateLimitedLog
from cronman.store.base import RunStore
from cronman.vocabulary import FINAL_STATUSES, IN_FLIGHT_STATUSES

log = logging.getLogger(__name__)

DEFAULT_FLUSH_INTERVAL = 0.25
DEFAULT_MAX_BATCH = 1000
DEFAULT_MAX_PENDING = 200_000
MIN_RETRY = 0.1
MAX_RETRY = 5.0
# Seconds the database must have been back before records of unclaimable
# fires are written (a replica's write-through of the real fire goes first).
UNREACHABLE_WRITE_DELAY = 5.0
# Seconds of failing flushes in a row after which writes count as stuck.
STUCK_AFTER = 10.0

class ClaimsWritten(Protocol):
    """Told when claims made while the database was down are in it (the
    node, which passes it on to the dispatcher)."""

    def claims_written(self, inserted: set[str], foreign: set[str]) -> None:
        """The runs ``inserted`` have their rows now; those ``foreign`` were
        fired twice (another node's row stands)."""


class UpdatesWritten(Protocol):
    """Told which run updates a flush committed, and when it ran (the
    traces' ``cronman.result_write`` spans: ``observability.tracing``)."""

    def updates_written(self, run_ids: Iterable[str], start_ns: int, end_ns: int) -> None:
        """The updates of ``run_ids`` were committed between the two times."""


class ResultWriter:
    """Batches run rows and updates from the event loop into the store."""

    def __init__(self, runs: RunStore, executor: Executor, metrics: NodeMetrics, *,
                 node_id: str, clock: ReferenceClock, lease_seconds: float = 30.0,
                 flush_interval: float = DEFAULT_FLUSH_INTERVAL,
                 max_batch: int = DEFAULT_MAX_BATCH,
                 max_pending: int = DEFAULT_MAX_PENDING,
                 claims_written: ClaimsWritten | None = None,
                 traces: UpdatesWritten | None = None) -> None:
        self._runs = runs
        self._traces = traces  # None: tracing is off
        self._clock = clock
        self.node_id = node_id  # updates are fenced on it (write_run_updates)
        self.lease_seconds = lease_seconds
        self._claims_written = claims_written
        self._executor = executor
        self._metrics = metrics
        self.flush_interval = flush_interval
        self.max_batch = max_batch
        self.max_pending = max_pending
        self._updates: dict[str, RunUpdate] = {}
        self._flushing: dict[str, RunUpdate] = {}  # the updates being written now
        self._claims: list[Run] = []
        self._takeovers: set[str] = set()  # run ids of pending claims that are takeovers
        self._cursors: list[tuple[str, datetime, int]] = []
        self._unreachable: list[Run] = []
        self._foreign: dict[str, float] = {}  # run ids found to belong to a double fire
        self._wake: Wakeup | None = None
        self._db_back = asyncio.Event()  # set when a database call succeeds after failures
        self._lock = asyncio.Lock()
        self._db_ok_since: float | None = time.monotonic()
        self._retry = MIN_RETRY
        self._ratelog = RateLimitedLog(log)
        self._isolator = Isolator(metrics)
        self._failing_since: float | None = None  # monotonic; first failed flush in a row
        self._flush_started: float | None = None  # monotonic; the flush under way
        self._last_error = ""
        self.writes = 0  # commits made (updates and claims), for tests and stats

    # -- event-loop side --------------------------------------------------

    def update(self, u: RunUpdate) -> None:
        """Queue a change to a run; merged with a queued change to the same run."""
        if u.id in self._foreign:
            return
        old = self._updates.get(u.id)
        if old is None:
            self._updates[u.id] = u
        else:
            old.absorb(u)
        self._after_add()

    def insert_later(self, runs: Sequence[Run], cursors: Sequence[tuple[str, datetime, int]],
                     *, takeover: bool = False) -> None:
        """Claims made while the database was down: insert them (through the
        fence) before any update, when the database is back. ``takeover``:
        fires taken over from a replica that never started them, whose row
        may exist (it becomes ours, not a double fire)."""
        if takeover:
            self._takeovers.update(r.id for r in runs)
        self._claims.extend(runs)
        self._cursors.extend(cursors)
        self._after_add()

    def record_unreachable(self, runs: Sequence[Run]) -> None:
        """Fires nobody could claim: written as ``skipped`` rows when possible."""
        self._unreachable.extend(runs)
        self._after_add()

    def note_store(self, ok: bool) -> None:
        """What another database call of the node found: reachable or not."""
        if not ok:
            self._db_ok_since = None
        elif self._db_ok_since is None:
            self._db_ok_since = time.monotonic()
            self._db_back.set()
            if self._wake is not None and (self._claims or self._unreachable):
                self._wake.set()

    def discard(self, run_id: str) -> None:
        """Drop queued and future updates of a run this node no longer owns."""
        self._updates.pop(run_id, None)
        self._foreign[run_id] = time.monotonic()

    def withdraw(self, run_id: str) -> None:
        """Forget a run this node will not fire after all (a replica took it
        over): its pending claim, if any, and every update of it."""
        if any(r.id == run_id for r in self._claims):
            self._claims = [r for r in self._claims if r.id != run_id]
        self._takeovers.discard(run_id)
        self.discard(run_id)

    def reclaim(self, run_id: str) -> None:
        """This node holds the run again (taken over, swept, requested): its
        updates count again, whatever was decided about it before."""
        self._foreign.pop(run_id, None)

    def has_pending_update(self, run_id: str) -> bool:
        """Whether a change of the run waits here or is being written now."""
        return run_id in self._updates or run_id in self._flushing

    def pending_update_keys(self) -> list[tuple[str, datetime]]:
        """(id, scheduled_for) of runs in the database whose changes wait here
        -- finished runs among them: their rows must not look abandoned to a
        sweeper while the write is late (lease renewal covers them)."""
        if not self._updates and not self._flushing:
            return []
        claims = {r.id for r in self._claims}
        return [(u.id, u.scheduled_for)
                for u in [*self._updates.values(), *self._flushing.values()]
                if u.id not in claims]

    def has_pending_claim(self, run_id: str) -> bool:
        return any(r.id == run_id for r in self._claims)

    @property
    def pending(self) -> int:
        return len(self._updates) + len(self._claims) + len(self._unreachable)

    def failing_for(self) -> float:
        """Seconds the flushes have been failing in a row (0 when they succeed)."""
        since = self._failing_since
        return 0.0 if since is None else max(0.0, time.monotonic() - since)

    def health(self) -> str | None:
        """None while run writes go through; else what is stuck, and why: the
        flushes failed for ``STUCK_AFTER`` seconds in a row, or one has been
        waiting on the database that long."""
        started = self._flush_started
        if started is not None and time.monotonic() - started >= STUCK_AFTER:
            return (f"a run write has been waiting on the database for "
                    f"{time.monotonic() - started:.0f} s ({len(self._flushing)} updates in it, "
                    f"{self.pending} more waiting)")
        failing = self.failing_for()
        if failing < STUCK_AFTER:
            return None
        return (f"run writes failing for {failing:.0f} s, {self.pending} waiting: "
                f"{self._last_error}")

    def _after_add(self) -> None:
        n = self.pending
        if n > self.max_pending:
            self._shed(n - self.max_pending)
        if self._wake is not None and len(self._updates) >= self.max_batch:
            self._wake.set()

    def _shed(self, excess: int) -> None:
        dropped = 0
        while excess > 0 and self._unreachable:
            self._unreachable.pop(0)
            excess -= 1
            dropped += 1
        if excess > 0:
            for run_id in [k for k, u in self._updates.items()
                           if u.status not in FINAL_STATUSES][:excess]:
                del self._updates[run_id]
                excess -= 1
                dropped += 1
        if excess > 0:
            for run_id in list(self._updates)[:excess]:
                del self._updates[run_id]
                dropped += 1
        if dropped:
            self._metrics.results_dropped.inc(dropped)
            self._ratelog.error("shed", "run write buffer full (%d waiting): dropped %d updates; "
                                "the database has been unreachable too long", self.pending,
                                dropped)

    async def run(self, lifecycle: Lifecycle) -> None:
        """Flush periodically until the node stops (the caller then calls ``drain``)."""
        self._wake = Wakeup()
        while not lifecycle.stopping:
            await self._wake.wait(self.flush_interval)
            self._wake.clear()
            if lifecycle.stopping:
                break
            ok = await self.flush()
            if not ok:
                # Back off, but write at once when the node sees the database back.
                self._db_back.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._db_back.wait(), timeout=self._retry)
                self._retry = min(MAX_RETRY, self._retry * 2)
            else:
                self._retry = MIN_RETRY

    async def drain(self, deadline: float) -> bool:
        """Flush until nothing is left or the monotonic ``deadline`` passes."""
        delay = MIN_RETRY
        while True:
            ok = await self.flush(final=True)
            if ok and not self._updates and not self._claims:
                return True
            if time.monotonic() + delay > deadline:
                if self.pending:
                    log.error("stopping with %d run writes not done: the database is "
                              "unreachable", self.pending)
                return False
            await asyncio.sleep(delay)
            delay = min(1.0, delay * 2)

    async def flush(self, final: bool = False) -> bool:
        """Write what is queued (one batch each of claims and updates). False
        when the database was unreachable (everything is kept)."""
        async with self._lock:
            return await self._flush(final)

    async def _flush(self, final: bool) -> bool:
        if not self._updates and not self._claims and not self._due_unreachable(final):
            if not self.pending:
                self._failing_since = None
                self._metrics.writes_failing.set(0)
            return True
        batch = WriteBatch(self._claims, self._cursors, self._updates, [])
        self._claims, self._cursors, self._updates = [], [], {}
        self._flushing = batch.updates
        if self._due_unreachable(final):
            batch.unreachable, self._unreachable = self._unreachable, []
        loop = asyncio.get_running_loop()
        ok = False
        self._flush_started = time.monotonic()
        started_ns = time.time_ns() if self._traces is not None else 0
        try:
            await loop.run_in_executor(self._executor, self._write, batch)
            ok = True
        except StoreUnavailable as exc:
            self._metrics.store_errors.labels("write_runs").inc()
            self._ratelog.error("store", "cannot write %d run changes, will retry: %s",
                                batch.left(), exc)
            self._db_ok_since = None
            self._failed(str(exc))
        except Exception as exc:  # a bug of ours: keep the rows, say so, retry
            log.exception("unexpected error writing run changes; will retry")
            self._failed(reason_of(exc))
        finally:
            self._flush_started = None
            self._flushing = {}
            if not ok:
                self._restore(batch.claims, batch.cursors, batch.updates_left(),
                              batch.unreachable)
            self._metrics.pending_writes.set(self.pending)
        self._done(batch)
        if started_ns and batch.updated:
            assert self._traces is not None
            self._traces.updates_written(batch.updated, started_ns, time.time_ns())
        if not ok:
            return False
        self._failing_since = None
        self._metrics.writes_failing.set(0)
        if self._db_ok_since is None:
            self._db_ok_since = time.monotonic()
            self._ratelog.clear("store")
            log.info("database reachable again: run changes written")
        return True

    def _failed(self, error: str) -> None:
        if self._failing_since is None:
            self._failing_since = time.monotonic()
        self._last_error = error
        self._metrics.writes_failing.set(self.failing_for())

    def _done(self, batch: WriteBatch) -> None:
        """What the committed part of a flush tells the node (a failed flush too)."""
        self.writes += batch.written
        if (batch.inserted or batch.foreign) and self._claims_written is not None:
            self._claims_written.claims_written(batch.inserted - batch.foreign, batch.foreign)
        if batch.foreign:
            now = time.monotonic()
            for run_id in batch.foreign:
                self._foreign[run_id] = now
                self._updates.pop(run_id, None)
            self._expire_foreign(now)

    def _due_unreachable(self, final: bool) -> bool:
        if not self._unreachable or self._db_ok_since is None:
            return False
        return final or time.monotonic() - self._db_ok_since >= UNREACHABLE_WRITE_DELAY

    def _restore(self, claims: list[Run], cursors: list[tuple[str, datetime, int]],
                 updates: dict[str, RunUpdate], unreachable: list[Run]) -> None:
        self._claims[:0] = claims
        self._cursors[:0] = cursors
        self._unreachable[:0] = unreachable
        newer = self._updates
        self._updates = updates
        for u in newer.values():
            old = updates.get(u.id)
            if old is None:
                updates[u.id] = u
            else:
                old.absorb(u)
        if self.pending > self.max_pending:
            self._shed(self.pending - self.max_pending)

    def _expire_foreign(self, now: float) -> None:
        if len(self._foreign) > 10_000:
            for run_id, at in list(self._foreign.items()):
                if now - at > 3600:
                    del self._foreign[run_id]

    # -- worker-thread side -----------------------------------------------

    def _write(self, batch: WriteBatch) -> None:
        """Write a batch: claims (and cursors) first, then updates, then records
        of unclaimable fires. Committed rows leave ``batch``."""
        if batch.claims or batch.cursors:
            self._write_claims(batch)
        if batch.updates:
            updates = [u for u in batch.updates.values() if u.id not in batch.foreign]

            def updated(part: Sequence[RunUpdate], _: object) -> None:
                batch.updated.update(u.id for u in part)

            self._isolator.write(batch, updates,
                           lambda part: self._runs.write_run_updates(part, self.node_id),
                           updated, cut_update, "run update")
            batch.updated.update(batch.foreign)  # their updates are dropped
        if batch.unreachable:
            def recorded(part: Sequence[Run], _: object) -> None:
                ids = {r.id for r in part}
                batch.unreachable = [r for r in batch.unreachable if r.id not in ids]

            self._isolator.write(batch, list(batch.unreachable),
                           lambda part: self._runs.claim_runs(part, ()),
                           recorded, cut_run, "record of a fire not dispatched")

    def _write_claims(self, batch: WriteBatch) -> None:
        # The lease counts from now: the rows must not look abandoned to a
        # sweeper between this commit and the one of their updates.
        lease_until = self._clock.now() + timedelta(seconds=self.lease_seconds)
        for r in batch.claims:
            if r.status in IN_FLIGHT_STATUSES:
                r.lease_expires_at = lease_until
        refused: list[Run] = []  # claims whose row exists already

        def claimed(part: Sequence[Run], inserted: object) -> None:
            ids = {r.id for r in part}
            batch.claims = [r for r in batch.claims if r.id not in ids]
            if isinstance(inserted, set):  # None: the claim was dropped
                batch.inserted |= inserted
                refused.extend(r for r in part if r.id not in inserted)

        def advanced(part: Sequence[Cursor], _: object) -> None:
            batch.cursors = [c for c in batch.cursors if c not in part]

        try:  # one commit for the claims and the cursors, as a rule
            inserted = self._runs.claim_runs(batch.claims, batch.cursors)
            batch.written += 1
            claimed(list(batch.claims), inserted)
            batch.cursors = []
        except StoreUnavailable:
            raise
        except Exception as exc:
            log.warning("the database refused a batch of %d claims: %s; writing them apart",
                        len(batch.claims), reason_of(exc))
            self._isolator.write(batch, list(batch.claims),
                           lambda part: self._runs.claim_runs(part, ()),
                           claimed, cut_run, "claim", whole_failed=bool(batch.claims))
            self._isolator.write(batch, list(batch.cursors),
                           lambda part: self._runs.claim_runs((), part),
                           advanced, cut_cursor, "job cursor")
        self._settle_refused_claims(batch, refused, lease_until)

    def _settle_refused_claims(self, batch: WriteBatch, refused: list[Run],
                               lease_until: datetime) -> None:
        """Claims whose row existed: a taken-over fire's row becomes ours if
        its holder never started it (the same compare-and-set as a takeover
        with the database up); any other was fired twice."""
        retaken: set[str] = set()
        keys = [(r.id, r.scheduled_for) for r in refused if r.id in self._takeovers]
        if keys:
            try:
                retaken = self._runs.start_claimed_runs(self.node_id, keys, self._clock.now(),
                                                              lease_until)
                batch.written += 1
            except StoreUnavailable:
                # Their rows are in; the compare-and-set is what is left to do.
                batch.claims[:0] = [r for r in refused if r.id in self._takeovers]
                refused = [r for r in refused if r.id not in self._takeovers]
                self._mark_foreign(batch, refused)
                raise
        self._takeovers.difference_update(r.id for r in refused)
        self._takeovers.difference_update(batch.inserted)
        self._mark_foreign(batch, [r for r in refused if r.id not in retaken])
        batch.inserted |= retaken

    def _mark_foreign(self, batch: WriteBatch, runs: list[Run]) -> None:
        if not runs:
            return
        batch.foreign.update(r.id for r in runs)
        self._metrics.double_fires.inc(len(runs))
        for r in runs:
            log.error("double fire: job %s at %s was dispatched while the database was "
                      "down, and its run %s already existed (another node fired it too)",
                      r.job_id, r.scheduled_for.isoformat(), r.id)

