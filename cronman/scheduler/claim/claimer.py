"""The claimer: fires due soon leave the job table in batches and are claimed.

It pops every fire due within ``claim_lead`` and claims them as one batch at
most every ``claim_interval`` (sooner for a fire due within ``urgent_lead``),
on the claim thread (``batch.claim_batch``: the coordinator lock, then the
database fence). Winners go to the dispatcher, which starts each at its exact
due time: claim latency stays out of lateness, and a node makes a handful of
commits per second whatever the fire rate. Fires lost to a replica's lock go
on standby (``takeover``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from functools import partial
from typing import Protocol

from cronman.coordination.base import Coordinator
from cronman.eventloop import Wakeup
from cronman.observability.tracing import RunTraces
from cronman.scheduler.claim.batch import ClaimResult, claim_batch
from cronman.scheduler.claim.pulse import Pulser
from cronman.scheduler.claim.standby import Standby
from cronman.scheduler.dispatch.dispatcher import Dispatcher
from cronman.scheduler.fires import LOCK_TTL_MS, ActiveRun, Cursor, Fire
from cronman.scheduler.jobs.jobtable import JobTable
from cronman.scheduler.record.writer import STUCK_AFTER, ResultWriter
from cronman.scheduler.runtime.clock import ReferenceClock
from cronman.scheduler.runtime.lifecycle import Lifecycle, Pool
from cronman.scheduler.runtime.metrics import NodeMetrics
from cronman.scheduler.runtime.ratelog import RateLimitedLog
from cronman.store.base import RunStore

log = logging.getLogger(__name__)

CLAIM_LEAD = 0.5  # seconds ahead of due time a fire is claimed (at most)
# Seconds between claim batches under steady load (at most: a fire due within
# URGENT_LEAD calls a batch sooner, so at a steady rate batches come every
# CLAIM_LEAD - URGENT_LEAD). Each batch costs a lock script call per shard, a
# transaction and a hand-over whatever its size: at 1,000 fires/s on 3 nodes,
# 0.4 instead of 0.2 took 19 % of the commits and 3-13 % of the CPU per fire.
CLAIM_INTERVAL = 0.4
URGENT_LEAD = 0.15  # a fire due sooner than this is claimed without waiting for the interval
MAX_CLAIM_BATCH = 5000
# Fires popped from the table, or handed to the dispatcher, per loop turn. On
# a node that is behind, every turn is as long as the work queued in it, and
# a high-priority fire pays for several turns (its timer, its start mark, its
# attempt): with 500 a turn, the loop's lag reached p99 100-160 ms under 3x
# overload (the overload bench).
LOOP_CHUNK = 100
# The fires of jobs above the default priority are claimed further ahead: by
# twice the longest of the last PACE_ROUNDS batches' times, at most
# MAX_EXTRA_LEAD_MS more. Due fires are taken highest priority first, but one
# that falls due while a batch is being claimed waits for it; claimed ahead, it
# leaves on time while the default-priority backlog absorbs the lateness. (On
# a node that is not behind a batch takes milliseconds, and so does the extra
# lead. Keyed on being behind instead, the lead fell to nothing after every
# batch that happened to be on time, and the next, long one caught raised
# fires out. Smaller batches would shorten the wait too, but cost throughput:
# a starved node's batch takes about as long whatever its size.)
PACE_ROUNDS = 8
MAX_EXTRA_LEAD_MS = 5000
# A claim further ahead of its fire time than the claim lead plus this (by the
# coordinator's clock) is refused: this node's clock runs fast.
CLAIM_AHEAD_MARGIN_MS = 250
# A node whose dispatch is further behind than HOLD_BEHIND_MS (its oldest due
# fire not started), holding more runs than it started in the last
# HOLD_AHEAD_MS (and at least HOLD_MIN_HELD), holds back the due
# fires of its own jobs at or below the default priority in its job table,
# unclaimed, until it catches up (``JobTable.pop_due``). Claimed as they fall
# due, a backlog costs its claims (locks, rows, the hand-over, the leases)
# while the node cannot start it, and on a loop already late every raised
# fire waits behind that work. Held in the table, a job has one fire waiting,
# however many of its fire times pass, and one older than its grace follows
# the job's misfire policy when it is taken. Holding that much, the dispatch
# has work for as long while the next batch is claimed (a herd due at once is
# claimed as fast as it is started). The jobs' second owners are told by the
# through time: it stays before the fires held back, so they are not taken
# over.
HOLD_BEHIND_MS = 2000
HOLD_AHEAD_MS = 2000
HOLD_MIN_HELD = LOOP_CHUNK


class ClaimSwitch(Protocol):
    """Whether the node claims fires now (the node: ready, its clock within bounds)."""

    @property
    def claiming(self) -> bool:
        """False while the node loads or its clock is off: the jobs' other owners fire them."""


class Claimer:
    """Pops due fires from the table, claims them, hands them on."""

    def __init__(self, node_id: str, table: JobTable, coordinator: Coordinator, runs: RunStore,
                 dispatcher: Dispatcher, standby: Standby, writer: ResultWriter, pulses: Pulser,
                 *, switch: ClaimSwitch,
                 lease_seconds: float, clock: ReferenceClock, pool: Pool, lifecycle: Lifecycle,
                 metrics: NodeMetrics,
                 claim_lead: float = CLAIM_LEAD, claim_interval: float = CLAIM_INTERVAL,
                 traces: RunTraces | None = None) -> None:
        self.node_id = node_id
        self._traces = traces  # None: tracing is off
        self._table = table
        self._coordinator = coordinator
        self._runs = runs
        self._dispatcher = dispatcher
        self._standby = standby
        self._writer = writer
        self._pulses = pulses
        self._switch = switch
        self._lease_seconds = lease_seconds
        self._clock = clock
        self._pool = pool
        self._claim_started: float | None = None  # monotonic; the claim under way
        self._lifecycle = lifecycle
        self._metrics = metrics
        self.claim_lead_ms = int(claim_lead * 1000)
        self.claim_interval_ms = int(claim_interval * 1000)
        self.urgent_lead_ms = min(int(URGENT_LEAD * 1000), self.claim_lead_ms)
        self.lock_wins = 0
        self.lock_losses = 0
        # The oldest due time of the fires being popped, claimed or handed over.
        self.claiming_due: int | None = None
        # How many fires the claim under way holds (read on the pulse thread:
        # work in hand, like the dispatcher's held runs, for ``StallWatch``).
        self.claiming_count = 0
        self.extra_lead_ms = 0  # how much further ahead raised priorities are claimed
        self._starts: deque[tuple[int, int]] = deque()  # (ms, attempts started) samples
        self._round_ms: deque[int] = deque(maxlen=PACE_ROUNDS)  # the last batches' times
        self._wake = Wakeup()
        self._ratelog = RateLimitedLog(log)

    def wake(self) -> None:
        """The table changed: look at its head again."""
        self._wake.set()

    async def run(self) -> None:
        last_round = 0
        while not self._lifecycle.stopping:
            now = self._clock.now_ms()
            nd = self._table.next_due()
            if nd is None:
                wait_ms = 1000
            else:
                wake_at = max(nd - self.claim_lead_ms,
                              min(last_round + self.claim_interval_ms, nd - self.urgent_lead_ms))
                wait_ms = wake_at - now
            if self._table.held:  # whether to give them back is looked at every interval
                wait_ms = min(wait_ms, last_round + self.claim_interval_ms - now)
            if wait_ms > 0:
                self._wake.clear()
                await self._wake.wait(wait_ms / 1000.0)
                continue
            last_round = now
            extra = self.extra_lead_ms
            hold = self._switch.claiming and self.behind(now)
            try:
                fires, cursors = await self._pop(now, extra, hold=hold)
                skipped = self._table.take_misfires_skipped()
                if skipped:
                    self._metrics.misfires_skipped.inc(skipped)
                if not self._switch.claiming:
                    continue  # skewed clock: the jobs' other owners fire them
                fires = self._defer(fires)
                if fires or cursors:
                    await self.claim(fires, cursors, lead_ms=self.claim_lead_ms + extra)
            finally:
                self.claiming_due = None
            self._pace(round_ms=self._clock.now_ms() - now)

    def behind(self, now_ms: int) -> bool:
        """Whether the dispatch is more than ``HOLD_BEHIND_MS`` behind,
        holding more runs than it started in the last ``HOLD_AHEAD_MS`` (at
        least ``HOLD_MIN_HELD``): this node's own fires at or below the
        default priority are held back meanwhile."""
        d = self._dispatcher
        samples = self._starts
        samples.append((now_ms, d.starts))
        while len(samples) > 2 and samples[1][0] <= now_ms - HOLD_AHEAD_MS:
            samples.popleft()
        oldest = d.oldest_unstarted_due()
        if oldest is None or now_ms - oldest <= HOLD_BEHIND_MS:
            return False
        since_ms, starts = samples[0]
        if now_ms - since_ms < HOLD_AHEAD_MS // 2:
            return False  # not enough seen to tell how much it starts
        per_ms = (d.starts - starts) / (now_ms - since_ms)
        return len(d.active) > max(HOLD_MIN_HELD, per_ms * HOLD_AHEAD_MS)

    async def _pop(self, now: int, extra: int, *,
                   hold: bool = False) -> tuple[list[Fire], list[Cursor]]:
        """Up to ``MAX_CLAIM_BATCH`` due fires (see ``JobTable.pop_due`` for
        ``hold``), popped ``LOOP_CHUNK`` at a time with a loop turn between:
        a batch of thousands popped in one go would hold every timer back
        for as long (a high-priority fire falling due among them)."""
        fires: list[Fire] = []
        cursors: list[Cursor] = []
        until = now + self.claim_lead_ms
        table = self._table
        view = table.view_key  # each fire's first owner is of this view
        if not hold:
            table.release_held()
        while len(fires) < MAX_CLAIM_BATCH:
            held = table.held
            more, moved = table.pop_due(now, until, min(LOOP_CHUNK, MAX_CLAIM_BATCH - len(fires)),
                                        ahead_ms=extra, hold=hold)
            fires += more
            cursors += moved
            if len(more) + table.held - held < LOOP_CHUNK:
                break
            # Out of the table, not yet claimed: this node has not come
            # through them (its pulses' through time stays before them).
            if more:
                oldest = min(f.due_ms for f in more)
                due = self.claiming_due
                self.claiming_due = oldest if due is None else min(due, oldest)
            await asyncio.sleep(0)
            if self._table.view_key != view:
                break  # the membership changed: claim these as popped, the rest next round
        return fires, cursors

    def _pace(self, *, round_ms: int) -> None:
        """Claim raised priorities ahead by twice the longest recent batch's time."""
        rounds = self._round_ms
        rounds.append(round_ms)
        extra = min(MAX_EXTRA_LEAD_MS, 2 * max(rounds))
        if extra != self.extra_lead_ms:
            self.extra_lead_ms = extra
            self._metrics.claim_extra_lead.set(extra / 1000.0)

    def _defer(self, fires: list[Fire]) -> list[Fire]:
        """Hand the fires whose first owner is another node in charge to the
        standby (watched, not claimed); return the rest, to claim."""
        view = self._table.view_key
        in_charge: dict[str, bool] = {}
        mine: list[Fire] = []
        watched: list[Fire] = []
        for f in fires:
            p = f.primary
            if p is None:
                mine.append(f)
                continue
            ok = in_charge.get(p)
            if ok is None:
                ok = in_charge[p] = self._pulses.in_charge(p, view)
            (watched if ok else mine).append(f)
        if watched:
            self._standby.defer(watched)
        return mine

    async def claim(self, fires: list[Fire], cursors: list[Cursor], *, lead_ms: int) -> None:
        """Claim a batch (popped up to ``lead_ms`` ahead) on the claim thread
        and hand the winners to the dispatcher."""
        started = time.perf_counter()
        started_ns = time.time_ns() if self._traces is not None else 0
        call = partial(claim_batch, fires, cursors, coordinator=self._coordinator,
                       runs=self._runs, node_id=self.node_id, now=self._clock.now,
                       max_ahead_ms=lead_ms + CLAIM_AHEAD_MARGIN_MS,
                       lease_seconds=self._lease_seconds, lock_ttl_ms=LOCK_TTL_MS)
        self.claiming_due = min((f.due_ms for f in fires), default=None)
        self._claim_started = time.monotonic()
        self.claiming_count = len(fires)
        try:
            res = await self._pool(call)
        except Exception:
            self.claiming_due = None
            self.claiming_count = 0
            log.exception("claiming %d fires failed unexpectedly; they are not dispatched",
                          len(fires))
            return
        finally:
            self._claim_started = None
        self._count(res, time.perf_counter() - started, len(fires))
        self._report_backends(res)
        claimed = (started_ns, time.time_ns(), len(fires)) if started_ns else None
        if res.pending_runs or res.pending_cursors:
            self._writer.insert_later(res.pending_runs, res.pending_cursors)
        pending = {r.id for r in res.pending_runs}
        # Highest priority first, LOOP_CHUNK per loop turn (see ``_pop``).
        # Marked started at their due time even when claimed through the
        # fence alone: a replica may take over a fire by its lock and the
        # unstarted row (a view change as Redis comes back), and only the mark
        # -- in the coordinator, or else the row -- tells the two apart.
        dispatch = sorted(res.dispatch, key=lambda f: (-f.job.priority, f.due_ms))
        added = 0
        try:
            while added < len(dispatch):
                if added:
                    await asyncio.sleep(0)
                chunk = dispatch[added:added + LOOP_CHUNK]
                self._hand_over(chunk, res, pending, claimed)
                added += len(chunk)
        finally:  # stopped meanwhile: the claimed rest is held all the same
            self._hand_over(dispatch[added:], res, pending, claimed)
            self.claiming_due = None  # all in the dispatcher now
            self.claiming_count = 0
        self._standby.watch(res.standby)
        self._standby.watch_early(res.too_early)

    def _hand_over(self, fires: list[Fire], res: ClaimResult, pending: set[str],
                   claimed: tuple[int, int, int] | None) -> None:
        traces = self._traces
        for f in fires:
            ar = ActiveRun.of_fire(f, pending_claim=f.run_id in pending, mark_start=True,
                                   remote_in_flight=res.in_flight.get(f.job.id, []))
            if traces is not None:
                ar.trace = traces.begin(
                    run_id=ar.run_id, job_id=ar.job.id, job_name=ar.job.name,
                    namespace=ar.job.namespace, origin=ar.origin,
                    scheduled_for=ar.scheduled_for, claimed=claimed)
            self._dispatcher.add(ar)

    def health(self) -> str | None:
        """None unless a claim has been waiting on the database for ``STUCK_AFTER``
        seconds (a claim writes run rows too: the node fires nothing new meanwhile)."""
        started = self._claim_started
        if started is None or time.monotonic() - started < STUCK_AFTER:
            return None
        return (f"a claim has been waiting on the database for "
                f"{time.monotonic() - started:.0f} s")

    def _count(self, res: ClaimResult, seconds: float, batch: int) -> None:
        m = self._metrics
        m.claim_seconds.observe(seconds)
        m.claim_batch.observe(batch)
        if res.lock_wins:
            m.lock_wins.inc(res.lock_wins)
        if res.lock_losses:
            m.lock_losses.inc(res.lock_losses)
        self.lock_wins += res.lock_wins
        self.lock_losses += res.lock_losses
        if res.fence_losses:
            m.fence_losses.inc(res.fence_losses)
        if res.too_early:
            m.early_claims.inc(len(res.too_early))
            self._ratelog.warning("early-claims", "%d claims refused: their fires are further "
                                  "ahead of the cluster's clock than a claim may be (this "
                                  "host's clock runs fast); the jobs' other owners fire them, "
                                  "or this node after their due time", len(res.too_early))

    def _report_backends(self, res: ClaimResult) -> None:
        m = self._metrics
        if res.coordinator_error:
            m.coordinator_errors.labels("claim").inc()
            self._ratelog.error("claim-coordinator", "coordinator unreachable: claiming "
                                "through the database fence alone (%s)", res.coordinator_error)
        else:
            self._ratelog.clear("claim-coordinator")
        self._writer.note_store(res.store_error is None)
        if not res.store_error:
            self._ratelog.clear("claim-store")
            return
        m.store_errors.labels("claim").inc()
        if res.unreachable:
            m.not_dispatched.inc(len(res.unreachable))
            self._ratelog.error("claim-store", "neither the database (%s) nor the "
                                "coordinator is reachable: %d fires not dispatched",
                                res.store_error, len(res.unreachable))
            self._writer.record_unreachable(res.unreachable)
        else:
            self._ratelog.error("claim-store", "database unreachable (%s): dispatching "
                                "under the coordinator lock alone; run rows kept to write "
                                "later", res.store_error)
