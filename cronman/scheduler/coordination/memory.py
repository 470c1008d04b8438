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
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from cronman.errors import CoordinatorUnavailable
from cronman.scheduler.coordinator import NodeInfo
from cronman.timeutil import utcnow


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
        # Wall time of the clock's reading at creation, to date heartbeats.
        self.anchor = (clock(), utcnow())

    def wall(self, t: float) -> datetime:
        mono, wall = self.anchor
        return wall + timedelta(seconds=t - mono)

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
            table.members[node.id] = (node, table.clock())
            self._counters["heartbeats"] += 1

    def leave(self, node_id: str) -> None:
        self._check()
        with self._table.lock:
            self._table.members.pop(node_id, None)

    def live_members(self) -> list[NodeInfo]:
        self._check()
        table = self._table
        with table.lock:
            now = table.clock()
            for node_id in [i for i, (_, t) in table.members.items() if now - t >= table.ttl]:
                del table.members[node_id]
            live = [
                replace(info, last_heartbeat=table.wall(t)) for info, t in table.members.values()
            ]
        live.sort(key=lambda n: n.id)
        return live

    def claim_fires(self, keys: Sequence[tuple[str, int]], ttl_ms: int) -> list[bool]:
        self._check()
        if ttl_ms <= 0:
            raise ValueError("ttl_ms must be > 0")
        table = self._table
        won: list[bool] = []
        with table.lock:
            now = table.clock()
            table.purge_locks(now)
            expires = now + ttl_ms / 1000.0
            for job_id, fire_ms in keys:
                key = (job_id, int(fire_ms))
                held = table.locks.get(key)
                if held is None or held[1] <= now:
                    table.locks[key] = (self._holder, expires, False)
                    heapq.heappush(table.expiries, (expires, key))
                    won.append(True)
                else:
                    won.append(held[0] == self._holder)
            self._counters["claim_batches"] += 1
            self._counters["claim_keys"] += len(won)
        return won

    def start_fires(self, keys: Sequence[tuple[str, int]], ttl_ms: int) -> list[bool]:
        self._check()
        table = self._table
        out: list[bool] = []
        with table.lock:
            now = table.clock()
            table.purge_locks(now)
            for job_id, fire_ms in keys:
                key = (job_id, int(fire_ms))
                held = table.locks.get(key)
                if held is None or held[1] <= now:
                    expires = now + ttl_ms / 1000.0
                    table.locks[key] = (self._holder, expires, True)
                    heapq.heappush(table.expiries, (expires, key))
                    out.append(True)
                elif held[2] and held[0] != self._holder:
                    out.append(False)  # a replica took it over
                else:
                    table.locks[key] = (self._holder, held[1], True)
                    out.append(True)
            self._counters["start_batches"] += 1
        return out

    def take_over_fires(self, keys: Sequence[tuple[str, int]], ttl_ms: int) -> list[bool]:
        self._check()
        table = self._table
        out: list[bool] = []
        with table.lock:
            now = table.clock()
            table.purge_locks(now)
            for job_id, fire_ms in keys:
                key = (job_id, int(fire_ms))
                held = table.locks.get(key)
                if held is None or held[1] <= now or held[2] or held[0] == self._holder:
                    out.append(False)
                else:
                    table.locks[key] = (self._holder, held[1], True)
                    out.append(True)
            self._counters["takeovers"] += sum(out)
        return out

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
