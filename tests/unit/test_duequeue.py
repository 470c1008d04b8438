"""The dispatcher's due queue: one loop timer for every waiting run; the due
ones taken highest priority first, a bounded number per loop turn; a
cancelled or replaced wait never calls back; nothing is called early."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from cronman.config import Settings
from cronman.models import Job
from cronman.scheduler.dispatch.duequeue import DueQueue
from cronman.scheduler.fires import ActiveRun, Fire
from cronman.scheduler.runtime.clock import ReferenceClock
from tests.support.store_data import job_spec

CREATED = datetime(2026, 11, 27, tzinfo=UTC)


def _job(name: str, priority: int = 0) -> Job:
    spec = job_spec(name, priority=priority)
    return Job(id=f"id-{name}", version=1, start_at=None, end_at=None, jitter=None,
               paused=False, labels={}, dead_letter=None, created_at=CREATED,
               updated_at=CREATED, **{k: spec[k] for k in (
                   "namespace", "name", "schedule", "target", "retry", "misfire", "delivery",
                   "concurrency", "priority")})


class _Due:
    """The queue's ``DueRuns``: each run due goes to ``call``."""

    def __init__(self, call: Callable[[ActiveRun], object]) -> None:
        self.due = call


def _run(job: Job, due_ms: int) -> ActiveRun:
    return ActiveRun.of_fire(Fire(job=job, fire_ms=due_ms, due_ms=due_ms))


def _called(schedule: Callable[[DueQueue, int], None], seconds: float,
            tick_ms: int = 0) -> list[tuple[str, int]]:
    """Run a queue for ``seconds`` after ``schedule(queue, now_ms)``: the
    runs it called back, in order, as (job name, ms after its due time)."""
    clock = ReferenceClock()
    got: list[tuple[str, int]] = []

    async def main() -> None:
        late = _Due(lambda ar: got.append((ar.job.name, clock.now_ms() - ar.due_ms)))
        q = DueQueue(clock, late, tick_ms=tick_ms)
        schedule(q, clock.now_ms())
        await asyncio.sleep(seconds)

    asyncio.run(main())
    return got


def _next_tick(at_ms: int, tick_ms: int) -> int:
    return -(-at_ms // tick_ms) * tick_ms


def test_runs_come_due_in_time_order_never_early() -> None:
    def schedule(q: DueQueue, now: int) -> None:
        for name, delay in (("c", 60), ("a", 20), ("b", 40)):
            q.at(_run(_job(name), now + delay), now + delay)

    got = _called(schedule, 0.2)
    assert [name for name, _ in got] == ["a", "b", "c"]
    assert all(0 <= late < 50 for _, late in got), got


def test_a_later_earlier_run_rearms_the_timer() -> None:
    def schedule(q: DueQueue, now: int) -> None:
        q.at(_run(_job("late"), now + 5000), now + 5000)
        q.at(_run(_job("soon"), now + 10), now + 10)

    assert [name for name, _ in _called(schedule, 0.1)] == ["soon"]


def test_a_cancelled_or_replaced_wait_does_not_call_back() -> None:
    def schedule(q: DueQueue, now: int) -> None:
        cancelled, moved, kept = (_run(_job(n), now + 10) for n in ("cancelled", "moved", "kept"))
        for ar in (cancelled, moved, kept):
            q.at(ar, now + 10)
        assert cancelled.handle is not None
        cancelled.handle.cancel()
        assert cancelled.handle is None
        q.at(moved, now + 60)  # its first wait is replaced, not doubled

    assert [name for name, _ in _called(schedule, 0.15)] == ["kept", "moved"]


def test_runs_at_the_default_priority_go_together_on_the_next_tick_never_early() -> None:
    # Far longer than a node's tick, so that a loaded machine's stalls cannot
    # blur which timer a run went on.
    tick = 500
    jobs = {name: _job(name) for name in ("first", "second", "overdue")}
    due: dict[str, int] = {}

    def schedule(q: DueQueue, now: int) -> None:
        base = _next_tick(now + 350, tick)  # a tick 350-850 ms away
        due.update(first=base - 250, second=base - 50, overdue=now - 100, tick=base)
        for name, job in jobs.items():
            q.at(_run(job, due[name]), due[name])

    got = dict(_called(schedule, 1.0, tick_ms=tick))
    assert set(got) == {"first", "second", "overdue"}
    assert got["overdue"] < 100 + 150, got  # already due when handed over: at once
    # The others at the tick, together (on their own timers they would be 200
    # ms apart), never before their due time.
    called = {name: due[name] + got[name] for name in ("first", "second")}
    assert all(t >= due["tick"] for t in called.values()), (called, due)
    assert abs(called["first"] - called["second"]) < 100, called


def test_a_raised_priority_keeps_its_exact_timer_and_takes_what_is_due_along() -> None:
    tick = 500
    plain, raised = _job("plain"), _job("raised", priority=10)
    due: dict[str, int] = {}

    def schedule(q: DueQueue, now: int) -> None:
        base = _next_tick(now + 350, tick)
        due.update(plain=base - 250, raised=base - 150)
        q.at(_run(plain, due["plain"]), due["plain"])
        q.at(_run(raised, due["raised"]), due["raised"])

    got = dict(_called(schedule, 1.0, tick_ms=tick))
    assert 0 <= got["raised"] < 150, got  # its own time, before the tick
    # The turn the raised run wakes takes every run due by then.
    assert 100 <= got["plain"] < 250, got


def test_a_tick_of_0_keeps_every_run_on_its_exact_timer() -> None:
    def schedule(q: DueQueue, now: int) -> None:
        for name, delay in (("a", 20), ("b", 70)):
            q.at(_run(_job(name), now + delay), now + delay)

    got = _called(schedule, 0.2, tick_ms=0)
    assert [name for name, _ in got] == ["a", "b"]
    assert all(0 <= late < 50 for _, late in got), got


@pytest.mark.parametrize("tick_ms", [0, 100])
def test_a_backlog_goes_highest_priority_first_a_turn_share_at_a_time(tick_ms: int) -> None:
    """Thousands due at once: the raised ones first, and other callbacks get
    loop turns in between (the backlog is not taken in one turn, nor does it
    wait for ticks)."""
    clock = ReferenceClock()
    got: list[str] = []
    turns_seen: list[int] = []

    async def main() -> None:
        q = DueQueue(clock, _Due(lambda ar: got.append(ar.job.name)), per_turn=50, tick_ms=tick_ms)
        low, high = _job("low"), _job("high", priority=10)
        now = clock.now_ms()
        for i in range(1000):
            q.at(_run(low, now - 1000 + i), now - 1000 + i)
        q.at(_run(high, now), now)
        for _ in range(30):
            await asyncio.sleep(0)
            turns_seen.append(len(got))
        await asyncio.sleep(0.05)

    asyncio.run(main())
    assert got[0] == "high" and got.count("low") == 1000
    # Each turn takes at most its share.
    steps = [b - a for a, b in zip([0, *turns_seen], turns_seen, strict=False)]
    assert max(steps) <= 50, steps
    assert len(got) == 1001


def test_the_dispatch_tick_is_a_setting_within_bounds() -> None:
    assert Settings.from_env(environ={}).dispatch_tick_ms == 10
    assert Settings.from_env(environ={"CRONMAN_DISPATCH_TICK_MS": "0"}).dispatch_tick_ms == 0
    assert Settings.from_env(environ={"CRONMAN_DISPATCH_TICK_MS": "100"}).dispatch_tick_ms == 100
    for bad in ("-1", "101"):
        with pytest.raises(ValueError, match="CRONMAN_DISPATCH_TICK_MS"):
            Settings.from_env(environ={"CRONMAN_DISPATCH_TICK_MS": bad})
