"""The limits' gate: an attempt held to limits (``cronman.limits``: per
destination, and the namespaces' quotas) starts only once the cluster's
counters grant it a start of each, and a slot of each that caps
concurrency.

- **One round trip per batch**: the attempts that reach the gate in a loop
  turn, and the heads of the waiting queues whose time has come, go to the
  counters together (``LimitCounters.take``: one ``limits.lua`` call),
  highest priority first, then earliest due. Each call also says, per
  limit, the highest priority this node's fires wait on it with: another
  node's fires of a lower priority are refused meanwhile, so that priority
  holds across the nodes (for as long as the node keeps saying it).
- **Waiting**: an attempt refused waits in the queue of the limit that
  refused it, by priority then due time, marked started (no replica takes it
  over), out of the node's progress watermark (``ActiveRun.waiting``), its
  row's ``gate`` saying why (``{"limit": {"name", "reason", "since"}}``;
  once it starts, ``{"name", "waited_ms", "reason"}``). It
  is asked for again when the limit said it may allow one (its window moves,
  its bucket refills), at once when this node releases one of its slots,
  and every ``RELEASE_POLL_MS`` while its slots are all taken (another
  node's release is not heard).
- **Misfire**: a fire of the schedule that waits past its misfire grace goes
  through its job's misfire policy (``policies.plan_misfire`` over the job's
  waiting fires): ``skip`` skips it, ``fire_once`` keeps the latest one
  waiting, ``fire_all`` keeps every one.
- **Slots are leases** (``{node id}|{run id}/{attempt}``), released when the
  attempt ends and renewed every ``lease / 4`` (at most ``RENEW_MAX``) while
  it runs: the slots of a node that died come back within a lease (the
  node's heartbeat TTL).
- **Redis away**: for ``FALLBACK_AFTER_MS`` the attempts wait (a restart, a
  failover); then the node counts on its fair share of each limit
  (``limit_book.fair_share``: the whole over the most live members it saw
  since they went away, ``AwayMembers``) in memory, never more than the
  whole. Its own grants are mirrored there all along, so its share starts
  from what it has started and holds. Once Redis answers again, the node
  first tells it what it holds (``restore``), then asks it again. A Redis
  that restarted empty begins a new epoch: every node tells it what it holds
  (on its next ask or renewal), and it grants nothing for ``quarantine_ms``
  meanwhile: a renewal interval, the counters' longest back-off (a node in
  its back-off still counts on its fair share) and a second.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge

from cronman.coordination.limit_counters import (
    GRANTED,
    OUTRANKED,
    QUARANTINED,
    UNANSWERED,
    UNTIL_RELEASED,
    Answer,
    Ask,
    CountersRestarted,
    LimitCounters,
    LimitSpec,
)
from cronman.coordination.limits_memory import LocalLimitCounters
from cronman.errors import CoordinatorUnavailable
from cronman.limits import QUOTA_PREFIX
from cronman.scheduler import policies
from cronman.scheduler.dispatch.limit_book import AwayMembers, LimitBook, fair_share, spec_of
from cronman.scheduler.fires import ActiveRun
from cronman.scheduler.runtime.clock import ReferenceClock
from cronman.scheduler.runtime.lifecycle import Lifecycle
from cronman.scheduler.runtime.ratelog import RateLimitedLog
from cronman.timeutil import format_rfc3339, from_ms, to_ms
from cronman.vocabulary import RunOrigin

log = logging.getLogger(__name__)

# Rate windows are this much longer than they say: a receiver counting the
# arrivals of a second sees no more than the rate even when deliveries take
# up to this much longer or shorter than each other.
DELIVERY_SPREAD_MS = 25
# Ask again this often while a limit's slots are all taken.
RELEASE_POLL_MS = 20
HEAD = 64  # asks per waiting queue per round trip
# Counters that do not answer for this long: count on the fair share (before:
# wait, asking again every AWAY_RETRY_MS).
FALLBACK_AFTER_MS = 2000
AWAY_RETRY_MS = 100
QUARANTINE_SLACK_MS = 1000
RENEW_MAX = 2.0  # seconds between renewals of the slots, at most (lease / 4 below)
SWEEP_INTERVAL = 0.5  # seconds between looks at the waiting fires' grace


class LimitPassage(Protocol):
    """What the gate tells the dispatcher of an attempt it held."""

    def limit_passed(self, ar: ActiveRun) -> None:
        """``ar`` has its starts and slots: start it."""

    def limit_skipped(self, ar: ActiveRun, error: str) -> None:
        """``ar`` waited past its misfire grace and its policy skips it."""

    def note_waiting(self, ar: ActiveRun, gate: dict[str, Any]) -> None:
        """``ar`` waits on a limit (its row says so)."""


class LiveMembers(Protocol):
    @property
    def members(self) -> list[str]:
        """The live membership as this node last saw it."""


@dataclass(frozen=True, slots=True)
class Hold:
    """What an attempt was granted (``ActiveRun.limits``): the limits whose
    slot it holds, and whether they were counted here (Redis away)."""

    token: str
    slots: tuple[str, ...]
    local: bool


@dataclass(slots=True)
class _Wait:
    ar: ActiveRun
    passage: LimitPassage
    limit: str
    since_ms: int


class _Queue:
    """The attempts one limit refused, by priority then due time."""

    __slots__ = ("heap", "next_try_ms", "until_released")

    def __init__(self) -> None:
        self.heap: list[tuple[int, int, int, ActiveRun]] = []
        self.next_try_ms = 0
        self.until_released = False


class LimitMetrics:
    def __init__(self, registry: CollectorRegistry | None) -> None:
        self.waits = Counter("cronman_limit_waits", "Attempts that waited on a limit, by limit",
                             ("limit",), registry=registry)
        self.in_flight = Gauge("cronman_limit_in_flight",
                               "Slots of each limit this node's attempts hold", ("limit",),
                               registry=registry)
        self.waiting = Gauge("cronman_limit_waiting",
                             "Attempts waiting on a limit on this node now", registry=registry)
        self.fallbacks = Counter("cronman_limit_fair_share",
                                 "Batches counted on this node's fair share (Redis away)",
                                 registry=registry)


def token_of(ar: ActiveRun) -> str:
    return f"{ar.run_id}/{ar.attempt}"


def reason(spec: LimitSpec, answer: Answer) -> str:
    """Why an attempt waits, in words (``waiting on limit billing: 20 of 20 in flight``)."""
    name = spec.name
    what = (f"namespace {name[len(QUOTA_PREFIX):]}'s quota" if name.startswith(QUOTA_PREFIX)
            else f"limit {name}")
    if answer.used == QUARANTINED:
        return (f"waiting on {what}: its counters began anew (Redis restarted); the nodes "
                "tell them what they hold")
    if answer.used == OUTRANKED:
        return f"waiting on {what}: fires of a higher priority wait on it on other nodes"
    if answer.used == UNANSWERED:
        return f"waiting on {what}: its counters (Redis) do not answer"
    if answer.wait_ms == UNTIL_RELEASED:
        return f"waiting on {what}: {answer.used} of {spec.concurrency} in flight"
    if spec.count and answer.used >= spec.count:
        window = (f"{spec.window_ms / 1000:g} s" if spec.window_ms != 1000 else "second")
        return f"waiting on {what}: {answer.used} of {spec.count} starts in the last {window}"
    return f"waiting on {what}: its burst of {spec.burst} is used"


class LimitGate:
    """Holds attempts to their limits, for the dispatcher."""

    def __init__(self, node_id: str, counters: LimitCounters, book: LimitBook, *,
                 clock: ReferenceClock, members: LiveMembers, lifecycle: Lifecycle,
                 lease_ms: int, registry: CollectorRegistry | None = None,
                 margin_ms: int = DELIVERY_SPREAD_MS) -> None:
        self.node_id = node_id
        self.book = book
        self._counters = counters
        self._local = LocalLimitCounters(clock.now_ms)
        self._clock = clock
        self._members = members
        self._lifecycle = lifecycle
        self.lease_ms = lease_ms
        self.margin_ms = margin_ms
        self.metrics = LimitMetrics(registry)
        self._ratelog = RateLimitedLog(log)
        self._new: list[tuple[ActiveRun, LimitPassage]] = []
        self._queues: dict[str, _Queue] = {}
        self._waiting: dict[str, _Wait] = {}
        self._held: dict[str, tuple[ActiveRun, Hold]] = {}
        self._releases: list[tuple[str, str]] = []
        self._seq = itertools.count()
        self._busy = False
        self._scheduled = False
        self._away_since: int | None = None  # since when the counters do not answer
        self._away_members = AwayMembers()
        # Tell the shared counters what this node holds before asking them
        # again: at start, after a new epoch, after grants of the fair share.
        self._tell = True
        # After a new epoch, the nodes have this long to tell what they hold:
        # their renewals (every lease / 4) tell it too, and a node's first call
        # may wait out its back-off from the counters' outage.
        self.renew_every = max(SWEEP_INTERVAL, min(RENEW_MAX, lease_ms / 4000.0))
        self.quarantine_ms = (int(self.renew_every * 1000) + counters.retry_ms
                              + QUARANTINE_SLACK_MS)
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self.metrics.waiting.set_function(lambda: len(self._waiting))

    # -- the dispatcher's calls ---------------------------------------------

    def hold(self, ar: ActiveRun, passage: LimitPassage) -> bool:
        """Whether the gate takes ``ar`` (its attempt is held to limits and
        not granted yet): ``passage`` is told when it may start."""
        if ar.limits is not None or not self.book.limits_of(ar.job):
            return False
        self._new.append((ar, passage))
        self._kick()
        return True

    def release(self, ar: ActiveRun) -> None:
        """``ar``'s attempt ended: give back its slots."""
        hold: Hold | None = ar.limits
        ar.limits = None
        if hold is None or not hold.slots:
            return
        self._held.pop(hold.token, None)
        for name in hold.slots:
            self.metrics.in_flight.labels(name).dec()
        pairs = [(name, hold.token) for name in hold.slots]
        # Counted in both (the mirror, or the fair share; a local slot is told
        # to Redis by the renewals): given back in both.
        self._local.release_now(self.node_id, pairs)
        self._releases.extend(pairs)
        for name in hold.slots:
            q = self._queues.get(name)
            if q is not None and q.until_released:
                q.next_try_ms = 0
        self._kick()

    def stop(self) -> None:
        """The node hands its runs back: forget the waiting ones."""
        self._new.clear()
        self._queues.clear()
        self._waiting.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- asking the counters -------------------------------------------------

    def _kick(self) -> None:
        if self._busy or self._scheduled:
            return
        self._scheduled = True
        asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        if self._busy:
            return
        now = self._clock.now_ms()
        batch = [(ar, p) for ar, p in self._new if not ar.done]
        self._new = []
        # What this node's fires wait on, with the highest priority waiting:
        # the other nodes' lower fires give way (priority across the nodes).
        waiting = {name: -q.heap[0][0] for name, q in self._queues.items() if q.heap}
        for q in self._queues.values():
            if q.heap and q.next_try_ms <= now:
                for _ in range(min(HEAD, len(q.heap))):
                    ar = heapq.heappop(q.heap)[3]
                    wait = self._waiting.get(ar.run_id)
                    if wait is not None and not ar.done and ar.limits is None:
                        batch.append((ar, wait.passage))
        releases, self._releases = self._releases, []
        if not batch and not releases:
            self._arm()
            return
        batch.sort(key=lambda e: (-e[0].job.priority, e[0].due_ms))
        self._busy = True
        task = asyncio.get_running_loop().create_task(self._ask(batch, releases, waiting))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _ask(self, batch: list[tuple[ActiveRun, LimitPassage]],
                   releases: list[tuple[str, str]], waiting: dict[str, int]) -> None:
        try:
            if releases:
                try:
                    await self._counters.release(self.node_id, releases)
                except CoordinatorUnavailable as exc:  # their leases run out
                    self._ratelog.warning("release", "limit slots not released: %s", exc)
            if batch:
                await self._take(batch, waiting)
        except Exception:  # a bug must not keep fires waiting without a word
            log.exception("asking for the limits of %d attempts failed", len(batch))
            now = self._clock.now_ms()
            for ar, passage in batch:
                if not ar.done and ar.limits is None:
                    self._requeue(ar, passage, None, now + 1000)
        finally:
            self._busy = False
            self._kick()

    async def _take(self, batch: list[tuple[ActiveRun, LimitPassage]],
                    waiting: dict[str, int]) -> None:
        specs: list[LimitSpec] = []
        index: dict[str, int] = {}
        asks = []
        for ar, _ in batch:
            ks = []
            for lim in self.book.limits_of(ar.job):
                k = index.get(lim.name)
                if k is None:
                    k = index[lim.name] = len(specs)
                    specs.append(self.book.spec(lim.name) or spec_of(lim))
                ks.append(k)
            asks.append(Ask(token_of(ar), tuple(ks), ar.job.priority))
        local = False
        try:
            answers = await self._shared_take(specs, asks, waiting)
            if self._away_since is not None:
                self._away_since = None
                self._away_members.back()
                log.info("limits counted on the shared counters again")
            self._ratelog.clear("take")
            for ask, answer in zip(asks, answers, strict=True):
                if answer.granted:  # mirrored: a fair share starts from it
                    self._local.record(self.node_id, specs, ask, lease_ms=self.lease_ms)
        except CoordinatorUnavailable as exc:
            now = self._clock.now_ms()
            members = self._away_members.seen(len(self._members.members))
            if self._away_since is None:
                self._away_since = now
            if now - self._away_since < FALLBACK_AFTER_MS:
                # Away only a moment (a restart, a failover): wait for it.
                self._ratelog.warning("take", "the limits' counters do not answer: %s", exc)
                answers = [Answer(False, ask.limits[0], UNANSWERED, AWAY_RETRY_MS)
                           if ask.limits else GRANTED for ask in asks]
            else:
                self._ratelog.warning("take", "limits counted on this node's fair share "
                                              "(1/%d): %s", members, exc)
                self.metrics.fallbacks.inc()
                local = self._tell = True
                answers = self._local.take_now(self.node_id,
                                               [fair_share(s, members) for s in specs], asks,
                                               lease_ms=self.lease_ms, margin_ms=self.margin_ms)
        now = self._clock.now_ms()
        for (ar, passage), ask, answer in zip(batch, asks, answers, strict=True):
            if answer.granted:
                hold = Hold(ask.token, tuple(specs[k].name for k in ask.limits
                                             if specs[k].concurrency), local)
                ar.limits = hold
                if ar.done:
                    self.release(ar)
                    continue
                if hold.slots:
                    self._held[hold.token] = (ar, hold)
                    for name in hold.slots:
                        self.metrics.in_flight.labels(name).inc()
                self._passed(ar, passage, now)
            elif not ar.done:
                spec = specs[answer.limit]
                wait = (RELEASE_POLL_MS if answer.wait_ms == UNTIL_RELEASED
                        else answer.wait_ms)
                self._requeue(ar, passage, (spec, answer), now + wait)

    async def _shared_take(self, specs: list[LimitSpec], asks: list[Ask],
                           waiting: dict[str, int]) -> list[Answer]:
        """``take`` on the shared counters, telling them first what this node
        holds when they began anew (or did not hear of its fair share's grants)."""
        for _ in range(3):
            if self._tell:
                await self._restore()
            try:
                return await self._counters.take(
                    self.node_id, specs, asks, lease_ms=self.lease_ms,
                    margin_ms=self.margin_ms, quarantine_ms=self.quarantine_ms,
                    waiting=waiting)
            except CountersRestarted as exc:
                log.warning("%s: telling them what this node holds", exc)
                self._tell = True
        raise CoordinatorUnavailable("the limits' counters keep beginning anew")

    async def _restore(self) -> None:
        await self._counters.restore(self.node_id, self._local.held(self.node_id),
                                     self.lease_ms)
        self._tell = False

    def _passed(self, ar: ActiveRun, passage: LimitPassage, now: int) -> None:
        wait = self._waiting.pop(ar.run_id, None)
        if wait is not None:
            ar.waiting = False
            entry: dict[str, Any] = {"name": wait.limit, "waited_ms": max(0, now - wait.since_ms)}
            held = (ar.gate or {}).get("limit")
            if isinstance(held, dict) and held.get("name") == wait.limit and held.get("reason"):
                entry["reason"] = held["reason"]  # what was in flight, or the rate, then
            ar.gate = {**(ar.gate or {}), "limit": entry}
        passage.limit_passed(ar)

    def _requeue(self, ar: ActiveRun, passage: LimitPassage,
                 refusal: tuple[LimitSpec, Answer] | None, at_ms: int) -> None:
        wait = self._waiting.get(ar.run_id)
        name = refusal[0].name if refusal is not None else (wait.limit if wait else "")
        if wait is None:
            now = self._clock.now_ms()
            wait = self._waiting[ar.run_id] = _Wait(ar, passage, name, now)
            ar.waiting = True
            self.metrics.waits.labels(name).inc()
            if refusal is not None:
                passage.note_waiting(ar, {**(ar.gate or {}), "limit": {
                    "name": name, "reason": reason(*refusal),
                    "since": format_rfc3339(from_ms(now))}})
        wait.limit = name
        q = self._queues.get(name)
        if q is None:
            q = self._queues[name] = _Queue()
        heapq.heappush(q.heap, (-ar.job.priority, ar.due_ms, next(self._seq), ar))
        q.next_try_ms = at_ms
        q.until_released = refusal is not None and refusal[1].wait_ms == UNTIL_RELEASED
        self._arm()

    def _arm(self) -> None:
        """One timer for the earliest queue whose time comes."""
        due = [q.next_try_ms for q in self._queues.values() if q.heap]
        if not due:
            return
        at = min(due)
        if self._timer is not None:
            if self._timer_at <= at:
                return
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        self._timer_at = at
        self._timer = loop.call_later(max(0, at - self._clock.now_ms()) / 1000.0, self._wake)

    def _wake(self) -> None:
        self._timer = None
        self._kick()

    # -- grace and leases ----------------------------------------------------

    def sweep(self) -> None:
        """Fires of the schedule waiting past their misfire grace go through
        their job's misfire policy."""
        now = self._clock.now_ms()
        by_job: dict[str, list[_Wait]] = {}
        for wait in list(self._waiting.values()):
            ar = wait.ar
            if ar.done or ar.limits is not None:
                self._waiting.pop(ar.run_id, None)
                continue
            if ar.origin == RunOrigin.SCHEDULE.value and ar.started_at is None:
                by_job.setdefault(ar.job.id, []).append(wait)
        for waits in by_job.values():
            policy, grace_ms = policies.misfire_settings(waits[0].ar.job.misfire)
            if not any(w.ar.due_ms < now - grace_ms for w in waits):
                continue
            waits.sort(key=lambda w: to_ms(w.ar.scheduled_for))
            plan = policies.plan_misfire([to_ms(w.ar.scheduled_for) for w in waits], 0, now,
                                         policy, grace_ms)
            keep = set(plan.fire)
            for w in waits:
                if to_ms(w.ar.scheduled_for) in keep:
                    continue
                self._waiting.pop(w.ar.run_id, None)
                w.ar.waiting = False
                w.passage.limit_skipped(w.ar, (
                    f"waited on {w.limit} past its misfire grace ({grace_ms / 1000:g} s): "
                    f"misfire policy {policy}"))

    async def renew(self) -> None:
        """Extend the leases of the slots this node's attempts hold."""
        pairs: list[tuple[str, str]] = []
        for token, (ar, hold) in list(self._held.items()):
            if ar.done and not ar.in_attempt:
                self.release(ar)  # it ended without an attempt's end (handed back)
                continue
            pairs.extend((name, token) for name in hold.slots)
        self._local.renew_now(self.node_id, pairs, self.lease_ms)
        try:
            if self._tell:
                await self._restore()
            elif pairs:
                await self._counters.renew(self.node_id, pairs, self.lease_ms)
            self._ratelog.clear("renew")
        except CountersRestarted as exc:
            log.warning("%s: telling them what this node holds", exc)
            self._tell = True
            await self.renew()
        except CoordinatorUnavailable as exc:
            self._ratelog.warning("renew", "limit slots not renewed: %s", exc)

    async def run(self) -> None:
        """Sweep the waiting fires and renew the slots until the node stops."""
        renew_every = self.renew_every
        since_renew = 0.0
        await self.renew()  # learns the counters' epoch (a fresh Redis begins one)
        while not await self._lifecycle.sleep(SWEEP_INTERVAL):
            self.sweep()
            since_renew += SWEEP_INTERVAL
            if since_renew >= renew_every:
                since_renew = 0.0
                await self.renew()
