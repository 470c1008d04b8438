"""The dispatcher's wait queue: fires due while every dispatch slot is busy.

Order: higher priority first, strictly. Within a priority, namespaces take
turns (start-time fair queueing over one queue per namespace, one unit per
fire), each namespace's own fires going earliest due first. A namespace that
starts waiting is tagged one past the turn being served, so a herd of N
fires from one namespace does not hold back another's: a fire waits for at
most one fire of each other namespace waiting at its priority (plus whatever
higher priority arrives), and an idle namespace earns no credit to jump the
queue later.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Any

_Flow = tuple[int, str]  # (priority, namespace)


class FairQueue:
    """Work waiting for a dispatch slot: priority, then namespace turns, then due."""

    __slots__ = ("_flows", "_turns", "_seq", "_served", "_size")

    def __init__(self) -> None:
        self._flows: dict[_Flow, list[tuple[int, int, Any]]] = {}  # (due_ms, seq, item)
        # One entry per waiting namespace: (-priority, its turn's tag, seq, flow).
        self._turns: list[tuple[int, int, int, _Flow]] = []
        self._seq = itertools.count()
        self._served: dict[int, int] = {}  # priority -> tag of the turn last served
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def push(self, priority: int, due_ms: int, item: Any, namespace: str = "") -> None:
        key = (priority, namespace)
        flow = self._flows.get(key)
        if flow is None:
            flow = self._flows[key] = []
            self._take_turn(key, self._served.get(priority, 0) + 1)
        heapq.heappush(flow, (due_ms, next(self._seq), item))
        self._size += 1

    def pop(self) -> Any:
        neg_priority, tag, _, key = heapq.heappop(self._turns)
        self._served[-neg_priority] = tag
        flow = self._flows[key]
        item = heapq.heappop(flow)[2]
        self._size -= 1
        if flow:
            self._take_turn(key, tag + 1)
        else:
            del self._flows[key]
        return item

    def drain(self) -> list[Any]:
        """Everything waiting, by priority then due; the queue is left empty."""
        entries = sorted((-p, due, seq, item) for (p, _), flow in self._flows.items()
                         for due, seq, item in flow)
        self._flows.clear()
        self._turns.clear()
        self._served.clear()
        self._size = 0
        return [e[3] for e in entries]

    def _take_turn(self, key: _Flow, tag: int) -> None:
        heapq.heappush(self._turns, (-key[0], tag, next(self._seq), key))
