"""The timer heap and the dispatch wait queue."""

from __future__ import annotations

import random

from cronman.scheduler.dispatch.waitqueue import FairQueue
from cronman.scheduler.runtime.timers import TimerHeap


def test_pops_the_due_entries_highest_priority_first_then_in_due_order():
    h = TimerHeap()
    h.push(200, 0, "b", 200, 1)
    h.push(100, 0, "a", 100, 1)
    h.push(200, 5, "c", 200, 1)
    h.push(150, 5, "d", 150, 1)
    h.push(300, 0, "e", 300, 1)
    assert h.peek_due() == 100
    got = [e[2] for e in h.pop_due(250)]
    assert got == ["d", "c", "a", "b"]
    assert len(h) == 1
    assert h.peek_due() == 300


def test_a_backlog_is_taken_highest_priority_first_across_calls():
    """A node behind takes its late high-priority fires before older low ones,
    and fires that fall due later join the back of their priority's lane."""
    h = TimerHeap()
    for i in range(6):
        h.push(i, 0, f"low{i}", i, 1)
    h.push(5, 10, "high5", 5, 1)
    assert [e[2] for e in h.pop_due(5, limit=3)] == ["high5", "low0", "low1"]
    assert h.peek_due() == 2  # the oldest waiting: low2, in its lane
    h.push(6, 10, "high6", 6, 1)
    h.push(1, 0, "low-late", 1, 1)  # pushed late, with an earlier due time
    assert [e[2] for e in h.pop_due(6, limit=3)] == ["high6", "low2", "low3"]
    assert [e[2] for e in h.pop_due(6)] == ["low4", "low5", "low-late"]
    assert len(h) == 0 and h.peek_due() is None


def test_raised_priorities_can_be_taken_ahead_of_the_others():
    """A node that is behind claims fires above the default priority further
    ahead (``ahead_ms``); default and lower priorities keep the plain bound."""
    h = TimerHeap()
    h.push(1000, 5, "high", 1000, 1)
    h.push(1000, 0, "default", 1000, 1)
    h.push(900, -3, "low", 900, 1)
    h.push(2000, 5, "high-later", 2000, 1)
    assert h.pop_due(500) == []
    assert [e[2] for e in h.pop_due(500, ahead_ms=600)] == ["high"]
    assert h.peek_due() == 900
    assert len(h) == 3
    assert [e[2] for e in h.pop_due(1000)] == ["default", "low"]
    assert sorted(e[2] for e in h.entries()) == ["high-later"]


def test_pop_due_respects_the_bound_and_limit():
    h = TimerHeap()
    for i in range(10):
        h.push(i * 10, 0, f"j{i}", i * 10, 0)
    assert [e[2] for e in h.pop_due(25, limit=2)] == ["j0", "j1"]
    assert [e[2] for e in h.pop_due(25)] == ["j2"]
    assert h.pop_due(29) == []
    assert len(h) == 7


def test_stale_entries_are_dropped_at_pop():
    h = TimerHeap()
    gens = {"a": 2, "b": 1}
    h.push(10, 0, "a", 10, 1)  # stale: job a moved on to generation 2
    h.push(11, 0, "a", 11, 2)
    h.push(12, 0, "b", 12, 1)
    h.push(13, 0, "gone", 13, 1)
    live = [e[2:] for e in h.pop_due(100, live=lambda e: gens.get(e[2]) == e[4])]
    assert live == [("a", 11, 2), ("b", 12, 1)]
    assert len(h) == 0


def test_compact_keeps_only_live_entries_in_order():
    h = TimerHeap()
    rnd = random.Random(7)
    for i in range(1000):
        h.push(rnd.randrange(10_000), 0, f"j{i}", 0, i % 2)
    h.pop_due(-1)  # nothing due: no entry moves
    h.push(-5, 3, "lane-live", 0, 0)
    h.push(-5, 3, "lane-stale", 0, 1)
    assert h.pop_due(-5, limit=0) == []  # both now wait in their lane
    dropped = h.compact(lambda e: e[4] == 0)
    assert dropped == 501
    assert h.pop_due(-5)[0][2] == "lane-live"
    dues = [e[0] for e in h.pop_due(10**9)]
    assert len(dues) == 500
    assert dues == sorted(dues)


def test_empty_heap():
    h = TimerHeap()
    assert h.peek_due() is None
    assert h.pop_due(10**12) == []


def test_wait_queue_orders_by_priority_then_due():
    q = FairQueue()
    q.push(0, 100, "low-early")
    q.push(5, 300, "high-late")
    q.push(5, 200, "high-early")
    q.push(0, 50, "low-earliest")
    assert len(q) == 4
    assert q.pop() == "high-early"
    assert q.drain() == ["high-late", "low-earliest", "low-early"]
    assert len(q) == 0


def test_a_namespace_herd_does_not_starve_another_namespace():
    """A herd queued at once; another namespace's fires queued behind it wait
    for at most one herd fire each, not for the herd."""
    q = FairQueue()
    for i in range(1000):
        q.push(0, i, f"herd-{i}", "herd")
    assert q.pop() == "herd-0"
    q.push(0, 5000, "steady-a", "steady")
    assert [q.pop(), q.pop()] == ["herd-1", "steady-a"]
    q.push(0, 6000, "steady-b", "steady")
    assert [q.pop(), q.pop()] == ["herd-2", "steady-b"]
    assert len(q) == 997


def test_namespaces_take_turns_within_a_priority_and_priority_stays_strict():
    q = FairQueue()
    for i in range(3):
        q.push(0, i, f"a{i}", "a")
    for i in range(3):
        q.push(0, 10 + i, f"b{i}", "b")
    q.push(5, 99, "urgent", "a")
    assert [q.pop() for _ in range(7)] == ["urgent", "a0", "b0", "a1", "b1", "a2", "b2"]
    assert len(q) == 0


def test_a_late_namespace_does_not_get_credit_for_its_idle_time():
    """A namespace that arrives late is tagged from what is being served,
    not from zero: it takes turns, it does not jump the whole queue."""
    q = FairQueue()
    for i in range(10):
        q.push(0, i, f"a{i}", "a")
    popped = [q.pop() for _ in range(5)]
    assert popped == [f"a{i}" for i in range(5)]
    for i in range(3):
        q.push(0, 100 + i, f"b{i}", "b")
    assert [q.pop() for _ in range(6)] == ["a5", "b0", "a6", "b1", "a7", "b2"]
