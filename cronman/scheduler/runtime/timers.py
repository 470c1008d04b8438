"""The timer heap of a scheduler node: the job table's timers (fires by due
time) and the dispatcher's due queue (runs by due time) are both one.

Entries are plain tuples ``(due_ms, -priority, job_id, fire_ms, state)``:
ordered by due time, then higher priority first, then job id (no insertion
counter: one int less per held job; ties need no particular order). ``state``
is the job's in-memory record when the entry was pushed (the job table's;
any object that orders, for ties); a job that changes or goes away gets a new
record or none, which makes its old entries stale. Stale entries are not
searched for and removed: they are discarded when popped (``pop_due`` takes a
predicate), and the heap is rebuilt when they outnumber the live ones.

Entries that fall due leave the heap for a *lane* of their priority (first in,
first out), and are taken from the highest priority's lane first. A node that
keeps up takes every due entry at once, so the order does not matter; a node
that is behind takes its backlog highest priority first, and the low
priorities absorb the lateness.

Entries above the default priority wait in a heap of their own, so that a
node that is behind can take them further ahead of their due time than the
others (``ahead_ms``): they are then claimed before they fall due, instead of
after the batch under way.
"""

from __future__ import annotations

import bisect
import heapq
from collections import deque
from collections.abc import Callable
from typing import Any

from cronman.vocabulary import DEFAULT_PRIORITY

Entry = tuple[int, int, str, int, Any]


class TimerHeap:
    """A min-heap of fire entries keyed by due time (Unix ms), and the due
    ones in lanes by priority."""

    __slots__ = ("_heap", "_raised", "_lanes", "_keys", "_in_lanes")

    def __init__(self) -> None:
        self._heap: list[Entry] = []
        self._raised: list[Entry] = []  # above the default priority
        self._lanes: dict[int, deque[Entry]] = {}  # by -priority
        self._keys: list[int] = []  # the lanes' keys, ascending (highest priority first)
        self._in_lanes = 0

    def __len__(self) -> int:
        return len(self._heap) + len(self._raised) + self._in_lanes

    def push(self, due_ms: int, priority: int, job_id: str, fire_ms: int, state: Any) -> None:
        heap = self._raised if priority > DEFAULT_PRIORITY else self._heap
        heapq.heappush(heap, (due_ms, -priority, job_id, fire_ms, state))

    def peek_due(self) -> int | None:
        """The earliest due time of an entry (stale or not; for an entry
        waiting in a lane, the due time of its lane's head), or None."""
        dues = [d for d in self.peek_due_split() if d is not None]
        return min(dues) if dues else None

    def peek_due_split(self) -> tuple[int | None, int | None]:
        """``peek_due`` in two: the earliest due time of the entries at or below
        the default priority and of those already in a lane, and the earliest
        of the entries above the default priority still waiting."""
        dues = [lane[0][0] for lane in self._lanes.values()]
        if self._heap:
            dues.append(self._heap[0][0])
        return (min(dues) if dues else None), (self._raised[0][0] if self._raised else None)

    def pop_due(self, until_ms: int, live: Callable[[Entry], bool] | None = None,
                limit: int | None = None, ahead_ms: int = 0) -> list[Entry]:
        """Pop entries due at or before ``until_ms`` -- ``until_ms + ahead_ms``
        for those above the default priority -- (at most ``limit`` live ones):
        highest priority first, then in due order; entries for which ``live``
        says False are dropped."""
        self._fall_due(self._heap, until_ms)
        self._fall_due(self._raised, until_ms + ahead_ms)
        out: list[Entry] = []
        keys, lanes = self._keys, self._lanes
        while keys and (limit is None or len(out) < limit):
            key = keys[0]
            lane = lanes[key]
            entry = lane.popleft()
            self._in_lanes -= 1
            if not lane:
                del lanes[key]
                keys.pop(0)
            if live is None or live(entry):
                out.append(entry)
        return out

    def requeue(self, entries: list[Entry]) -> None:
        """Put popped ``entries`` (in the order ``pop_due`` gave them) back at
        the front of their lanes: popped again before anything that fell due
        after them."""
        lanes = self._lanes
        for entry in reversed(entries):
            lane = lanes.get(entry[1])
            if lane is None:
                lane = self._new_lane(entry[1])
            lane.appendleft(entry)
        self._in_lanes += len(entries)

    def _new_lane(self, key: int) -> deque[Entry]:
        lane = self._lanes[key] = deque()
        bisect.insort(self._keys, key)
        return lane

    def _fall_due(self, heap: list[Entry], until_ms: int) -> None:
        lanes = self._lanes
        pop = heapq.heappop
        while heap and heap[0][0] <= until_ms:
            entry = pop(heap)
            lane = lanes.get(entry[1])
            if lane is None:
                lane = self._new_lane(entry[1])
            lane.append(entry)
            self._in_lanes += 1

    def compact(self, live: Callable[[Entry], bool]) -> int:
        """Drop stale entries (rebuilding the heap and the lanes); returns how
        many were dropped."""
        before = len(self)
        self._heap = [e for e in self._heap if live(e)]
        heapq.heapify(self._heap)
        self._raised = [e for e in self._raised if live(e)]
        heapq.heapify(self._raised)
        lanes = {k: deque(e for e in lane if live(e)) for k, lane in self._lanes.items()}
        self._lanes = {k: lane for k, lane in lanes.items() if lane}
        self._keys = sorted(self._lanes)
        self._in_lanes = sum(len(lane) for lane in self._lanes.values())
        return before - len(self)

    def entries(self) -> list[Entry]:
        """Every entry held, stale or not, in no particular order."""
        return [*self._heap, *self._raised,
                *(e for lane in self._lanes.values() for e in lane)]

    def clear(self) -> None:
        self._heap.clear()
        self._raised.clear()
        self._lanes.clear()
        self._keys.clear()
        self._in_lanes = 0
