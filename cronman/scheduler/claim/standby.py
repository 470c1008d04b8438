"""Fires a node watches instead of claiming, and their takeover.

A job's first owner claims its fires ahead of their due time and marks each
started in the coordinator right before sending it (``dispatch.start_marks``).
Its second owner only watches (``Standby``): a fire its holder has not
started is taken over (``batch.take_over_batch`` on the claim thread) when the holder is gone or stuck -- its pulses stopped, or say its
dispatch stopped moving -- never because it is late (``pulse``). A killed
node thus delays its claimed fires by well under a second instead of leaving
them to the lease sweeper; a busy one keeps its fires; and the coordinator
(or, without it, the run row) keeps the two from both sending one.
"""

from __future__ import annotations

import heapq
import logging
from collections import deque
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from cronman.coordination.base import Coordinator
from cronman.eventloop import Wakeup
from cronman.scheduler import policies
from cronman.scheduler.claim.batch import take_over_batch
from cronman.scheduler.claim.pulse import Pulser
from cronman.scheduler.dispatch.dispatcher import Dispatcher
from cronman.scheduler.fires import LOCK_TTL_MS, ActiveRun, Fire
from cronman.scheduler.record.writer import ResultWriter
from cronman.scheduler.runtime.clock import ReferenceClock
from cronman.scheduler.runtime.lifecycle import Lifecycle, Pool
from cronman.scheduler.runtime.metrics import NodeMetrics
from cronman.scheduler.runtime.ratelog import RateLimitedLog
from cronman.store.base import RunStore

log = logging.getLogger(__name__)

# How long past its due time a fire this node watches is looked at, unless
# its first owner's pulses tell sooner.
TAKEOVER_AFTER = 0.5
MAX_TAKEOVER_BATCH = 5000
SCAN_INTERVAL = 0.1  # seconds between looks at the watched fires (pulses wake it sooner)
IDLE_SCAN_INTERVAL = 1.0  # the same while nothing is watched
RECHECK_MS = 200  # a fire whose holder is alive is looked at again after this, doubling
RECHECK_MAX_MS = 2000
WATCH_MAX_MS = 120_000  # past this, a fire still held unstarted is the lease sweeper's


class View(Protocol):
    """Which membership this node's ownership is reckoned on (``jobs.jobtable.JobTable``)."""

    @property
    def view_key(self) -> str:
        """The view of the membership the job table is reconciled to."""


@dataclass(slots=True, eq=False)
class Watched:
    """A fire this node watches: when to look at it next, and how often it has."""

    fire: Fire
    check_at: int  # reference ms
    unclaimed_ok: bool  # watched as second owner: claim it if nobody did
    tries: int = 0
    early: bool = False  # refused as too early: claim it after its due time if nobody did


class Standby:
    """Fires this node watches instead of claiming, and takes over when their
    holder is gone or stuck.

    - *Deferred* fires: this node is their job's second owner and the first
      owner was in charge when they fell due (``Pulser.in_charge``). They
      cost no coordinator call while that owner's pulses show it came
      through them; the ones it has come through are looked at once
      (``take_over_fires`` with ``claim_absent``: a fire nobody claimed -- the
      owner did not know the job yet -- is claimed here). When the owner is
      gone or stalled, every deferred fire due soon is taken over at once,
      however old (its owner may have held it back unclaimed): those older
      than their grace as the job's misfire policy says.
    - *Race* fires: this node claimed them and lost the lock to another
      holder; looked at ``takeover_after`` past their due time.

    A holder that is alive (pulsing, dispatch progressing) is never taken
    over: the fire is looked at again later, up to ``WATCH_MAX_MS``; after
    that it is the lease sweeper's.
    """

    def __init__(self, node_id: str, coordinator: Coordinator, runs: RunStore,
                 dispatcher: Dispatcher, writer: ResultWriter, pulses: Pulser, *,
                 view: View, lease_seconds: float, clock: ReferenceClock,
                 pool: Pool, lifecycle: Lifecycle, metrics: NodeMetrics,
                 takeover_after: float = TAKEOVER_AFTER, claim_lead: float = 0.5) -> None:
        self.node_id = node_id
        self._coordinator = coordinator
        self._runs = runs
        self._dispatcher = dispatcher
        self._writer = writer
        self._pulses = pulses
        self._view = view
        self._lease_seconds = lease_seconds
        self._clock = clock
        self._pool = pool
        self._lifecycle = lifecycle
        self._metrics = metrics
        self.takeover_after_ms = int(takeover_after * 1000)
        self._claim_lead_ms = int(claim_lead * 1000)
        self._deferred: dict[str, deque[Watched]] = {}  # by first owner, in due order
        self._rechecks: list[tuple[int, int, Watched]] = []  # heap: (check at, seq, watched)
        self._seq = 0
        self._wake = Wakeup()
        self._ratelog = RateLimitedLog(log)

    @property
    def _watches_any(self) -> bool:
        return bool(self._deferred or self._rechecks)

    @property
    def watching(self) -> int:
        return sum(len(q) for q in self._deferred.values()) + len(self._rechecks)

    def defer(self, fires: list[Fire]) -> None:
        """Watch ``fires`` as their job's second owner (their ``primary`` claims them)."""
        for f in fires:
            assert f.primary is not None
            q = self._deferred.get(f.primary)
            if q is None:
                q = self._deferred[f.primary] = deque()
            q.append(Watched(f, f.due_ms + self.takeover_after_ms, True))

    def watch(self, fires: list[Fire]) -> None:
        """Watch ``fires`` this node lost to another holder's lock."""
        if self.takeover_after_ms < 0:
            return
        for f in fires:
            self._recheck(Watched(f, f.due_ms + self.takeover_after_ms, False))
        if fires:
            self._wake.set()

    def watch_early(self, fires: list[Fire]) -> None:
        """Watch ``fires`` whose claim was refused as too early (this host's
        clock runs ahead of the reference): if no other owner has fired one by
        ``takeover_after`` past its due time, it is claimed then -- late,
        never early, and never lost."""
        for f in fires:
            self._recheck(Watched(f, f.due_ms + max(0, self.takeover_after_ms), True,
                                  early=True))
        if fires:
            self._wake.set()

    def wake(self) -> None:
        """New pulses were read: look again (if anything is watched)."""
        if self._watches_any:
            self._wake.set()

    async def run(self) -> None:
        while not self._lifecycle.stopping:
            self._wake.clear()
            # Watching nothing, wait for a fire to watch (``watch`` and the
            # pulses after ``defer`` wake it): an idle node's loop then turns
            # for its pulses only.
            await self._wake.wait(SCAN_INTERVAL if self._watches_any else IDLE_SCAN_INTERVAL)
            if self._lifecycle.stopping:
                return
            await self.scan()

    async def scan(self) -> None:
        """Take what is due to be looked at."""
        now = self._clock.now_ms()
        view = self._view.view_key
        batches: dict[tuple[bool, str], list[Watched]] = {}
        for primary, q in list(self._deferred.items()):
            reason, limit = self._limit(primary, view, now)
            take: list[Watched] = []
            if reason == "in_charge":  # through: it started them, or ended them otherwise
                while q and q[0].fire.due_ms <= limit:
                    w = q.popleft()
                    if not self._expired(w, now):
                        take.append(w)
            else:
                while q and q[0].check_at <= limit:
                    take.append(q.popleft())
                take = self._misfire_policy(take, now)
            if take:
                batches.setdefault((True, reason), []).extend(take)
            if not q:
                del self._deferred[primary]
        while self._rechecks and self._rechecks[0][0] <= now:
            w = heapq.heappop(self._rechecks)[2]
            if not self._expired(w, now):
                batches.setdefault((w.unclaimed_ok, _reason(w)), []).append(w)
        for (claim_absent, reason), watched in batches.items():
            for start in range(0, len(watched), MAX_TAKEOVER_BATCH):
                await self._take_over(watched[start:start + MAX_TAKEOVER_BATCH],
                                      claim_absent, reason)

    def _limit(self, primary: str, view: str, now: int) -> tuple[str, int]:
        """Why and up to where a first owner's deferred fires are looked at:
        through its progress while it is in charge, at once when it is gone
        or stalled, ``takeover_after`` past due otherwise."""
        p = self._pulses.progress_of(primary)
        if p is not None and p.ready and not p.stalled and p.view == view:
            return "in_charge", p.through_ms
        if not self._pulses.known:
            return "unknown", now
        if p is None:
            return "gone", now + self._claim_lead_ms + self.takeover_after_ms
        if p.stalled:
            return "stalled", now + self._claim_lead_ms + self.takeover_after_ms
        return "not_ready", now

    def _misfire_policy(self, watched: list[Watched], now: int) -> list[Watched]:
        """Of the deferred fires of a first owner not in charge, the ones to
        take over: those within their job's grace, and of the older ones
        those the job's misfire policy fires (the rest are counted skipped,
        on the job's first fire taken). None is dropped unseen: the owner
        may have held them back, never claimed (``JobTable.pop_due``), and
        this node's table is past them."""
        by_job: dict[str, list[Watched]] = {}
        for w in watched:
            by_job.setdefault(w.fire.job.id, []).append(w)
        take: list[Watched] = []
        skipped = 0
        for ws in by_job.values():
            policy, grace_ms = policies.misfire_settings(ws[0].fire.job.misfire)
            if now - ws[0].fire.fire_ms <= grace_ms:
                take += ws  # in due order: none is older than its grace
                continue
            ws.sort(key=lambda w: w.fire.fire_ms)
            plan = policies.plan_misfire([w.fire.fire_ms for w in ws], 0, now, policy, grace_ms)
            fired = set(plan.fire)
            chosen = [w for w in ws if w.fire.fire_ms in fired]
            if chosen:
                chosen[0].fire.skipped_before += plan.skipped
            take += chosen
            skipped += plan.skipped
        if skipped:
            self._metrics.misfires_skipped.inc(skipped)
        return take

    def _expired(self, w: Watched, now: int) -> bool:
        """A fire watched too long, or older than its grace once its first
        owner came through it, is left to its holder and the lease sweeper
        (the first owner applies the misfire policy to what it could not
        fire in time)."""
        age = now - w.fire.due_ms
        return age > WATCH_MAX_MS or (w.unclaimed_ok and not w.early
                                      and age > _grace_ms(w.fire))

    def _recheck(self, w: Watched) -> None:
        self._seq += 1
        heapq.heappush(self._rechecks, (w.check_at, self._seq, w))

    async def _take_over(self, watched: list[Watched], claim_absent: bool,
                         reason: str) -> None:
        fires = [w.fire for w in watched]
        call = partial(take_over_batch, fires, coordinator=self._coordinator, runs=self._runs,
                       node_id=self.node_id, now=self._clock.now,
                       lease_seconds=self._lease_seconds, alive=self._pulses.alive_nodes(),
                       claim_absent=claim_absent, lock_ttl_ms=LOCK_TTL_MS)
        try:
            res = await self._pool(call)
        except Exception:
            log.exception("taking over %d watched fires failed unexpectedly", len(fires))
            return
        if res.coordinator_error:
            self._metrics.coordinator_errors.labels("takeover").inc()
        if res.watching:
            again = {id(f) for f in res.watching}
            now = self._clock.now_ms()
            for w in watched:
                if id(w.fire) in again:
                    w.tries += 1
                    w.check_at = now + min(RECHECK_MAX_MS, RECHECK_MS << min(w.tries, 4))
                    self._recheck(w)
        if not res.dispatch:
            return
        self._metrics.takeovers.labels(reason).inc(len(res.dispatch))
        self._ratelog.warning(f"takeover:{reason}", "took over %d fires (%s): their holder "
                              "had not started them and is %s", len(res.dispatch), reason,
                              _REASONS.get(reason, reason))
        if res.store_error:
            self._metrics.store_errors.labels("takeover").inc()
            self._writer.insert_later(res.pending_runs, [], takeover=True)
        pending = {r.id for r in res.pending_runs}
        for f in res.dispatch:
            self._dispatcher.add(ActiveRun.of_fire(f, pending_claim=f.run_id in pending,
                                                   mark_start=f.run_id in res.unstarted))


_REASONS = {
    "gone": "gone (no pulse)",
    "stalled": "stalled (its dispatch stopped moving)",
    "not_ready": "not in charge of it (not ready, or another membership view)",
    "unknown": "unknown (the coordinator cannot be read)",
    "in_charge": "in charge but never claimed it (it did not know the job yet)",
    "race": "not alive after winning the claim race",
    "recheck": "not alive any more",
    "early": "nobody: this node's claim was refused as too early and no other owner fired it",
}


def _reason(w: Watched) -> str:
    if w.early:
        return "early"
    return "recheck" if w.unclaimed_ok else "race"


def _grace_ms(fire: Fire) -> int:
    return policies.misfire_settings(fire.job.misfire)[1]
