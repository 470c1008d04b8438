"""The timer heap of a scheduler node.

Entries are plain tuples ``(due_ms, -priority, job_id, fire_ms, state)``:
ordered by due time, then higher priority first, then job id (no insertion
counter: one int less per held job; ties need no particular order). ``state``
is the job's in-memory record when the entry was pushed (the job table's;
any object that orders, for ties); a job that changes or goes away gets a new
record or none, which makes its old entries stale. Stale entries are not
searched for and removed: they are discarded when popped (``pop_due`` takes a
predicate), and the heap is rebuilt when they outnumber the live ones.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

Entry = tuple[int, int, str, int, Any]


class TimerHeap:
    """A min-heap of fire entries keyed by due time (Unix ms)."""

    __slots__ = ("_heap",)

    def __init__(self) -> None:
        self._heap: list[Entry] = []

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, due_ms: int, priority: int, job_id: str, fire_ms: int, state: Any) -> None:
        heapq.heappush(self._heap, (due_ms, -priority, job_id, fire_ms, state))

    def peek_due(self) -> int | None:
        """The due time of the earliest entry (stale or not), or None."""
        return self._heap[0][0] if self._heap else None

    def pop_due(self, until_ms: int, live: Callable[[Entry], bool] | None = None,
                limit: int | None = None) -> list[Entry]:
        """Pop every entry due at or before ``until_ms`` (at most ``limit`` live
        ones), in heap order; entries for which ``live`` says False are dropped."""
        heap = self._heap
        out: list[Entry] = []
        pop = heapq.heappop
        while heap and heap[0][0] <= until_ms:
            if limit is not None and len(out) >= limit:
                break
            entry = pop(heap)
            if live is None or live(entry):
                out.append(entry)
        return out

    def compact(self, live: Callable[[Entry], bool]) -> int:
        """Drop stale entries (rebuilding the heap); returns how many were dropped."""
        before = len(self._heap)
        self._heap = [e for e in self._heap if live(e)]
        heapq.heapify(self._heap)
        return before - len(self._heap)

    def clear(self) -> None:
        self._heap.clear()
