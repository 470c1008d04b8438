"""A node far behind holds back its own default-priority fires in its job
table instead of claiming them as they fall due: raised priorities and the
fires it watches for other first owners still go out, its through time stays
before what it holds, and what it held comes back first, under the misfire
policy, once it catches up."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from cronman.coordination.ownership import Ownership
from cronman.scheduler.claim.claimer import HOLD_AHEAD_MS, HOLD_BEHIND_MS, HOLD_MIN_HELD, Claimer
from cronman.scheduler.jobs.jobtable import JobTable
from cronman.scheduler.runtime.clock import ReferenceClock
from cronman.scheduler.runtime.lifecycle import Lifecycle
from cronman.scheduler.runtime.metrics import NodeMetrics
from cronman.scheduler.runtime.timers import TimerHeap
from tests.unit.test_node_jobtable import T0, make_job


def _fires(t: JobTable, now: int, **kw: Any) -> list[tuple[str, int, int]]:
    fires, _ = t.pop_due(now, now, **kw)
    return sorted((f.job.id, f.fire_ms - T0, f.skipped_before) for f in fires)


def test_requeued_entries_come_back_before_those_due_after_them():
    h = TimerHeap()
    for due, job in ((1, "a"), (2, "b"), (3, "c")):
        h.push(due, 0, job, due, None)
    first = h.pop_due(2)
    h.push(2, 0, "d", 2, None)
    h.requeue(first)
    assert [e[2] for e in h.pop_due(5)] == ["a", "b", "d", "c"]
    h.requeue([(9, -10, "raised", 9, None), (9, 0, "low", 9, None)])
    assert [e[2] for e in h.pop_due(0)] == ["raised", "low"]  # highest priority first


def test_held_back_the_table_gives_raised_priorities_only_and_the_rest_later():
    t = JobTable("n1", 1)
    assert t.load(make_job("low"), T0 + 600)
    assert t.load(make_job("high", priority=10), T0 + 600)
    now = T0 + 2000
    assert _fires(t, now, hold=True) == [("high", 1000, 0), ("high", 2000, 0)]
    assert t.held == 1  # one entry per job, however many fire times pass
    assert t.oldest_pending_due() == T0 + 1000  # the through time stays before it
    assert _fires(t, now) == [("low", 1000, 0), ("low", 2000, 0)]
    assert t.held == 0 and t.oldest_pending_due() == T0 + 3000


def test_fires_watched_for_another_first_owner_are_not_held_back():
    """A node behind still notes its first owners' fires (its standby
    watches them): only the jobs it claims itself are held."""
    t = JobTable("n1", 2, ["n1", "n2"])
    own = Ownership(["n1", "n2"], "n1", 2)
    for i in range(40):
        assert t.load(make_job(f"job-{i}"), T0 + 600)
    firsts = {job_id: own.owners(st.hash)[0] for job_id, st in t.jobs.items()}
    assert set(firsts.values()) == {"n1", "n2"}
    fires, _ = t.pop_due(T0 + 1000, T0 + 1000, hold=True)
    assert {f.job.id for f in fires} == {j for j, first in firsts.items() if first == "n2"}
    assert all(f.primary == "n2" for f in fires)
    assert t.held == sum(first == "n1" for first in firsts.values())


def test_a_fire_held_past_its_grace_follows_the_misfire_policy():
    t = JobTable("n1", 1)
    assert t.load(make_job("once", grace=3), T0 + 600)
    assert t.load(make_job("all", grace=3, policy="fire_all"), T0 + 600)
    assert t.load(make_job("skip", grace=3, policy="skip"), T0 + 600)
    assert _fires(t, T0 + 1000, hold=True) == [] and t.held == 3
    assert _fires(t, T0 + 7000) == [
        ("all", 1000, 0), ("all", 2000, 0), ("all", 3000, 0), ("all", 4000, 0),
        ("all", 5000, 0), ("all", 6000, 0), ("all", 7000, 0),
        ("once", 3000, 2), ("once", 4000, 0), ("once", 5000, 0), ("once", 6000, 0),
        ("once", 7000, 0),
        ("skip", 4000, 3), ("skip", 5000, 0), ("skip", 6000, 0), ("skip", 7000, 0)]


def test_a_membership_change_gives_the_held_fires_back():
    t = JobTable("n1", 1)
    assert t.load(make_job("low"), T0 + 600)
    assert _fires(t, T0 + 1000, hold=True) == [] and t.held == 1
    t.set_members(["n1", "n2"])
    assert t.held == 0


class Behind:
    """A dispatcher whose oldest unstarted fire is ``late_ms`` old."""

    def __init__(self) -> None:
        self.late_ms: int | None = None
        self.active: dict[int, None] = {}
        self.starts = 0

    def oldest_unstarted_due(self) -> int | None:
        return None if self.late_ms is None else T0 - self.late_ms


class _Switch:
    def __init__(self, claiming: bool) -> None:
        self.claiming = claiming


def _claimer(table: Any, dispatcher: Any, *, claiming: bool = True,
             lifecycle: Lifecycle | None = None, clock: Any = None) -> Claimer:
    return Claimer("n1", table, None, None, dispatcher, None, None, None,  # type: ignore[arg-type]
                   switch=_Switch(claiming), lease_seconds=30.0,
                   clock=clock or ReferenceClock(), pool=None,  # type: ignore[arg-type]
                   lifecycle=lifecycle, metrics=NodeMetrics(CollectorRegistry()))  # type: ignore[arg-type]


@pytest.mark.parametrize(("late_ms", "held", "per_s", "holds"), [
    (None, 10_000, 0, False),  # nothing due and unstarted
    (HOLD_BEHIND_MS, 10_000, 0, False),  # not far enough behind
    (HOLD_BEHIND_MS + 1, HOLD_MIN_HELD, 0, False),  # holding little
    (HOLD_BEHIND_MS + 1, HOLD_MIN_HELD + 1, 0, True),
    (HOLD_BEHIND_MS + 1, 3000, 2000, False),  # less than it starts in HOLD_AHEAD_MS
    (HOLD_BEHIND_MS + 1, 5000, 2000, True)])
def test_a_dispatch_far_behind_holding_more_than_it_soon_starts_holds_back(
        late_ms, held, per_s, holds):
    d = Behind()
    claimer = _claimer(None, d)
    step = 200
    for at in range(T0 - HOLD_AHEAD_MS, T0, step):  # a few rounds seen starting per_s
        claimer.behind(at)
        d.starts += per_s * step // 1000
    d.late_ms, d.active = late_ms, dict.fromkeys(range(held))
    assert claimer.behind(T0) is holds


def test_a_node_just_started_does_not_hold_back():
    d = Behind()
    d.late_ms, d.active = HOLD_BEHIND_MS + 1, dict.fromkeys(range(10_000))
    assert _claimer(None, d).behind(T0) is False  # how much it starts is not known yet


class FixedClock:
    def __init__(self, ms: int) -> None:
        self.ms = ms

    def now_ms(self) -> int:
        return self.ms


@pytest.mark.parametrize("claiming", [True, False])
def test_the_claim_loop_waits_between_rounds_while_it_holds_fires_back(claiming):
    """Holding fires back (or, its clock out of bounds, claiming nothing), the
    claim loop looks again every claim interval: it does not spin."""

    class Counting(JobTable):
        pops = 0

        def pop_due(self, *a: Any, **kw: Any) -> Any:
            Counting.pops += 1
            return super().pop_due(*a, **kw)

    t = Counting("n1", 1)
    assert t.load(make_job("low"), T0 + 600)
    assert _fires(t, T0 + 1000, hold=True) == [] and t.held == 1
    d = Behind()
    d.late_ms, d.active = HOLD_BEHIND_MS + 1, dict.fromkeys(range(10_000))
    life = Lifecycle()
    claimer = _claimer(t, d, claiming=claiming, lifecycle=life, clock=FixedClock(T0 + 1000))
    claimer._starts.append((T0 - HOLD_AHEAD_MS, 0))  # seen starting nothing

    async def run_for(seconds: float) -> None:
        task = asyncio.create_task(claimer.run())
        await asyncio.sleep(seconds)
        life.stop()
        claimer.wake()
        await asyncio.wait_for(task, 2.0)

    Counting.pops = 0
    asyncio.run(run_for(0.5))
    assert 1 <= Counting.pops <= 5
    assert t.held == (1 if claiming else 0)  # not claiming: handed back (and dropped)


def test_a_job_changed_while_its_fire_is_held_back_still_fires_it():
    """The fire was due before the change: it goes out, as the job is now;
    deleted, or paused, it does not."""
    t = JobTable("n1", 1)
    for job_id in ("changed", "paused", "deleted"):
        assert t.load(make_job(job_id), T0 + 600)
    assert _fires(t, T0 + 1000, hold=True) == [] and t.held == 3
    assert t.load(make_job("changed", version=2, priority=5), T0 + 1500)
    assert t.load(make_job("paused", version=2, paused=True), T0 + 1500)
    t.forget("deleted", T0 + 1500)
    assert t.held == 0
    assert _fires(t, T0 + 1600) == [("changed", 1000, 0)]
