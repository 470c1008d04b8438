"""In-process coordinator: membership, fire locks and outcome marks in memory.

Used by ``cronman standalone`` (one node, no Redis) and by tests that run
several nodes in one process. The table lives in the coordinator object, not
in a module global: nodes share it by sharing one instance or by taking
``handle()``s of it. Time comes from an injectable clock (seconds), so a test
can let a node's heartbeat expire by advancing the clock instead of sleeping.
"""

from __future__ import annotations

import heapq
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from cronman.coordination.base import (
    ABSENT,
    CLAIMED,
    EXPIRED,
    HELD,
    HOLDER_ALIVE,
    JOINED,
    LEFT,
    MEMBERSHIP_LOG_MAX,
    NOT_TAKEN,
    TAKEN,
    TOO_EARLY,
    MembershipChange,
    NodeInfo,
    Pulse,
    PulseReading,
)
from cronman.errors import CoordinatorUnavailable
from cronman.timeutil import to_ms, utcnow


class _Table:
    """The shared state behind every handle of one in-process coordinator."""

    def __init__(self, ttl: float, clock: Callable[[], float]) -> None:
        self.ttl = ttl
        self.clock = clock
        self.lock = threading.Lock()
        self.members: dict[str, tuple[NodeInfo, float]] = {}  # id -> (info, heartbeat time)
        # key -> (holder, expires, started)
        self.locks: dict[tuple[str, int], tuple[str, float, bool]] = {}
        self.expiries: list[tuple[float, tuple[str, int]]] = []  # heap over locks
        self.outcomes: dict[str, tuple[int, str, float]] = {}  # run id -> (attempt, mark, expires)
        self.outcome_expiries: list[tuple[float, str]] = []  # heap over outcomes
        self.pulses: dict[str, tuple[int, str, float]] = {}  # node -> (at ms, payload, expires)
        self.holders: dict[str, str] = {}  # a handle's lock holder token -> its node id
        self.changes: deque[MembershipChange] = deque(maxlen=MEMBERSHIP_LOG_MAX)
        # Wall time of the clock's reading at creation, to date heartbeats.
        self.anchor = (clock(), utcnow())
        # The reference clock a pulse reads (the "server's" TIME): this host's
        # own wall clock as it is now -- standalone has no other reference, so
        # a host clock stepped is the reference stepped, never a skew -- or,
        # when a test drives ``clock``, the anchor carried forward on it.
        self.server_ms: Callable[[], int] = (
            (lambda: to_ms(utcnow())) if clock is time.monotonic
            else (lambda: to_ms(self.wall(self.clock()))))

    def wall(self, t: float) -> datetime:
        mono, wall = self.anchor
        return wall + timedelta(seconds=t - mono)

    def expire_members(self, now: float) -> None:
        """Drop (and log) members whose last heartbeat is a TTL old."""
        for node_id, (info, t) in list(self.members.items()):
            if now - t >= self.ttl:
                del self.members[node_id]
                self.changes.append(MembershipChange(node_id, EXPIRED, self.wall(t + self.ttl),
                                                     info.started_at, info.address))

    def set_lock(self, key: tuple[str, int], holder: str, expires: float, started: bool) -> None:
        """Hold ``key`` for ``holder`` until ``expires`` (a renewal keeps its old
        heap item, which ``purge_locks`` passes over)."""
        self.locks[key] = (holder, expires, started)
        heapq.heappush(self.expiries, (expires, key))

    def purge_locks(self, now: float) -> None:
        _purge(self.expiries, self.locks, 1, now)

    def purge_outcomes(self, now: float) -> None:
        _purge(self.outcome_expiries, self.outcomes, 2, now)


def _purge(expiries: list[tuple[float, Any]], entries: dict[Any, tuple[Any, ...]],
           expires_at: int, now: float) -> None:
    """Drop the entries whose expiry (field ``expires_at``) has passed, walking
    the heap of (expiry, key); a key renewed since its heap item stays."""
    while expiries and expiries[0][0] <= now:
        _, key = heapq.heappop(expiries)
        held = entries.get(key)
        if held is not None and held[expires_at] <= now:
            del entries[key]


class InProcessCoordinator:
    """A ``Coordinator`` whose members and locks live in this process.

    ``ttl`` is the heartbeat TTL in seconds; ``clock`` returns seconds
    (``time.monotonic`` by default; tests pass a fake they can advance).
    A member is live while ``clock() - last heartbeat < ttl``. A lock taken by
    ``claim_fires`` is held until ``ttl_ms`` after the claim, by this handle:
    claiming a key this handle already holds answers True again (a retried
    claim must not lose its own lock), any other handle gets False.
    ``start_fires``, ``take_over_fires`` and the outcome marks follow the
    Redis coordinator's rules.
    """

    shared = False

    def __init__(self, ttl: float, clock: Callable[[], float] = time.monotonic) -> None:
        if ttl <= 0:
            raise ValueError("ttl must be > 0")
        self._init(_Table(ttl, clock))

    def _init(self, table: _Table) -> None:
        self._table = table
        self._holder = uuid.uuid4().hex
        self._available = True
        self._closed = False
        self._counters = {
            "heartbeats": 0,
            "heartbeat_failures": 0,
            "claim_batches": 0,
            "claim_keys": 0,
            "start_batches": 0,
            "takeovers": 0,
            "outcome_batches": 0,
            "outcome_marks": 0,
            "unavailable": 0,
        }

    def handle(self) -> InProcessCoordinator:
        """Another coordinator over the same members and locks, for another node.

        Each handle holds its own locks, can be made unavailable on its own
        (``set_available``) and closed on its own.
        """
        other = InProcessCoordinator.__new__(InProcessCoordinator)
        other._init(self._table)
        return other

    @property
    def ttl(self) -> float:
        return self._table.ttl

    def set_available(self, available: bool) -> None:
        """Make every call of this handle fail with ``CoordinatorUnavailable``
        (``False``) or work again (``True``): a node cut off from Redis."""
        self._available = available

    def _check(self) -> None:
        if self._closed:
            raise CoordinatorUnavailable("coordinator closed")
        if not self._available:
            self._counters["unavailable"] += 1
            raise CoordinatorUnavailable("in-process coordinator marked unavailable")

    def join(self, node: NodeInfo) -> None:
        self.heartbeat(node)

    def heartbeat(self, node: NodeInfo) -> None:
        try:
            self._check()
        except CoordinatorUnavailable:
            self._counters["heartbeat_failures"] += 1
            raise
        table = self._table
        with table.lock:
            now = table.clock()
            table.expire_members(now)
            if node.id not in table.members:
                table.changes.append(MembershipChange(node.id, JOINED, table.wall(now),
                                                      node.started_at, node.address))
            table.members[node.id] = (node, now)
            table.holders[self._holder] = node.id
            self._counters["heartbeats"] += 1

    def leave(self, node_id: str) -> None:
        self._check()
        table = self._table
        with table.lock:
            gone = table.members.pop(node_id, None)
            if gone is not None:
                info = gone[0]
                table.changes.append(MembershipChange(node_id, LEFT, table.wall(table.clock()),
                                                      info.started_at, info.address))

    def membership_changes(self, since: datetime) -> list[MembershipChange]:
        self._check()
        table = self._table
        with table.lock:
            table.expire_members(table.clock())
            found = [c for c in reversed(table.changes) if c.at >= since]
        found.sort(key=lambda c: c.at, reverse=True)  # stable: ties stay newest first
        return found

    def live_members(self) -> list[NodeInfo]:
        self._check()
        table = self._table
        with table.lock:
            now = table.clock()
            table.expire_members(now)
            live = [
                replace(info, last_heartbeat=table.wall(t)) for info, t in table.members.values()
            ]
        live.sort(key=lambda n: n.id)
        return live

    def claim_fires(self, keys: Sequence[tuple[str, int]], ttl_ms: int, *,
                    max_ahead_ms: int | None = None) -> list[int]:
        self._check()
        if ttl_ms <= 0:
            raise ValueError("ttl_ms must be > 0")
        table = self._table
        won: list[int] = []
        with table.lock:
            now = table.clock()
            now_ms = to_ms(table.wall(now))
            table.purge_locks(now)
            expires = now + ttl_ms / 1000.0
            for job_id, fire_ms in keys:
                key = (job_id, int(fire_ms))
                held = table.locks.get(key)
                if max_ahead_ms is not None and fire_ms > now_ms + max_ahead_ms:
                    won.append(TOO_EARLY)
                elif held is None or held[1] <= now:
                    table.set_lock(key, self._holder, expires, False)
                    won.append(CLAIMED)
                else:
                    won.append(CLAIMED if held[0] == self._holder else HELD)
            self._counters["claim_batches"] += 1
            self._counters["claim_keys"] += len(won)
        return won

    def start_fires(self, keys: Sequence[tuple[str, int]], ttl_ms: int, *,
                    due_ms: Sequence[int] | None = None,
                    early_ms: int | None = None) -> list[int]:
        self._check()
        table = self._table
        out: list[int] = []
        with table.lock:
            now = table.clock()
            now_ms = to_ms(table.wall(now))
            table.purge_locks(now)
            for i, (job_id, fire_ms) in enumerate(keys):
                key = (job_id, int(fire_ms))
                held = table.locks.get(key)
                live = held is not None and held[1] > now
                early = (due_ms[i] - now_ms if due_ms is not None and early_ms is not None
                         else 0)
                if live and held is not None and held[2]:
                    out.append(1 if held[0] == self._holder else 0)  # 0: a replica took it over
                elif early_ms is not None and early > early_ms:
                    out.append(-early)
                else:  # a started lock lives ``ttl_ms`` from its start
                    own = live and held is not None and held[0] == self._holder
                    table.set_lock(key, self._holder, now + ttl_ms / 1000.0, True)
                    out.append(1 if own else 2)  # 2: gone or another's claim
            self._counters["start_batches"] += 1
        return out

    def take_over_fires(self, keys: Sequence[tuple[str, int]], ttl_ms: int, *,
                        alive: Collection[str] = (), report_absent: bool = False) -> list[int]:
        self._check()
        table = self._table
        out: list[int] = []
        with table.lock:
            now = table.clock()
            table.purge_locks(now)
            for job_id, fire_ms in keys:
                key = (job_id, int(fire_ms))
                held = table.locks.get(key)
                if held is None or held[1] <= now:
                    out.append(ABSENT if report_absent else NOT_TAKEN)
                elif held[2] or held[0] == self._holder:
                    out.append(NOT_TAKEN)
                elif table.holders.get(held[0]) in alive:
                    out.append(HOLDER_ALIVE)
                else:
                    table.set_lock(key, self._holder, now + ttl_ms / 1000.0, True)
                    out.append(TAKEN)
            self._counters["takeovers"] += out.count(TAKEN)
        return out

    async def astart_fires(self, keys: Sequence[tuple[str, int]], ttl_ms: int, *,
                           due_ms: Sequence[int] | None = None,
                           early_ms: int | None = None) -> list[int]:
        return self.start_fires(keys, ttl_ms, due_ms=due_ms, early_ms=early_ms)

    async def amark_outcomes(self, marks: Sequence[tuple[str, int, str]], ttl_ms: int) -> None:
        self.mark_outcomes(marks, ttl_ms)

    async def aclose(self) -> None:
        return None

    def pulse(self, node_id: str, payload: str, ttl_ms: int,
              peers: Sequence[str]) -> PulseReading:
        sent = time.monotonic()
        self._check()
        table = self._table
        with table.lock:
            now = table.clock()
            server_ms = table.server_ms()
            table.pulses[node_id] = (server_ms, payload, now + ttl_ms / 1000.0)
            found = {}
            for peer in peers:
                held = table.pulses.get(peer)
                if held is not None and held[2] > now:
                    found[peer] = Pulse(peer, held[0], held[1])
        return PulseReading(server_ms, sent, time.monotonic(), found)

    def mark_outcomes(self, marks: Sequence[tuple[str, int, str]], ttl_ms: int) -> None:
        self._check()
        table = self._table
        with table.lock:
            now = table.clock()
            table.purge_outcomes(now)
            expires = now + max(1, int(ttl_ms)) / 1000.0
            for run_id, attempt, mark in marks:
                held = table.outcomes.get(run_id)
                if held is not None and held[0] > attempt:
                    continue
                table.outcomes[run_id] = (attempt, mark, expires)
                heapq.heappush(table.outcome_expiries, (expires, run_id))
            self._counters["outcome_batches"] += 1
            self._counters["outcome_marks"] += len(marks)

    def read_outcomes(self, run_ids: Sequence[str]) -> list[str | None]:
        self._check()
        table = self._table
        with table.lock:
            table.purge_outcomes(table.clock())
            found = [table.outcomes.get(run_id) for run_id in run_ids]
        return [None if held is None else held[1] for held in found]

    def ping(self) -> bool:
        return not self._closed and self._available

    def stats(self) -> dict[str, int]:
        with self._table.lock:
            held = len(self._table.locks)
        return {**self._counters, "shards": 1, "shards_up": int(self.ping()), "locks_held": held}

    def close(self) -> None:
        """Close this handle; other handles of the same table keep working."""
        self._closed = True
