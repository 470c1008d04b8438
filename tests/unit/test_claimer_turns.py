"""The claimer's work on the event loop comes in turns: a batch of thousands
of due fires is popped, and handed to the dispatcher, ``LOOP_CHUNK`` at a time,
so that timers -- a high-priority fire falling due -- are not held back for
the whole batch; and meanwhile the node's through time stays before every
fire it has not handed over (a peer would otherwise take them as unclaimed)."""

from __future__ import annotations

import asyncio
from typing import Any

from prometheus_client import CollectorRegistry

from cronman.scheduler.claim.batch import ClaimResult
from cronman.scheduler.claim.claimer import LOOP_CHUNK, Claimer
from cronman.scheduler.fires import ActiveRun, Fire
from cronman.scheduler.runtime.clock import ReferenceClock
from cronman.scheduler.runtime.metrics import NodeMetrics
from tests.unit.test_node_jobtable import make_job

BATCH = 4 * LOOP_CHUNK + 17
DUE = 1_800_000_000_000


def _fires(count: int) -> list[Fire]:
    jobs = [make_job(f"job-{p}", priority=p) for p in (0, 10)]
    return [Fire(jobs[1 if i % 10 == 0 else 0], DUE + i, DUE + i) for i in range(count)]


class Table:
    """Hands out its fires in due order, ``limit`` per call."""

    view_key = "v"
    held = 0

    def __init__(self, fires: list[Fire]) -> None:
        self.fires = fires

    def pop_due(self, now_ms, until_ms, limit, *, ahead_ms=0, hold=False):
        got, self.fires = self.fires[:limit], self.fires[limit:]
        return got, []

    def release_held(self) -> None: ...


class Dispatcher:
    def __init__(self) -> None:
        self.added: list[ActiveRun] = []

    def add(self, ar: ActiveRun) -> None:
        self.added.append(ar)


class Standby:
    def watch(self, fires) -> None: ...

    def watch_early(self, fires) -> None: ...


class _Claiming:
    claiming = True


class Writer:
    def note_store(self, ok: bool) -> None: ...

    def insert_later(self, runs, cursors) -> None: ...


def _claimer(table: Any, dispatcher: Any, result: ClaimResult | None = None) -> Claimer:
    async def pool(fn, *args):
        return result

    return Claimer("a", table, None, None, dispatcher, Standby(), Writer(), None,  # type: ignore[arg-type]
                   switch=_Claiming(), lease_seconds=30.0, clock=ReferenceClock(),
                   pool=pool, lifecycle=None, metrics=NodeMetrics(CollectorRegistry()))  # type: ignore[arg-type]


async def _turns_during(work, claimer: Claimer) -> tuple[Any, list[int | None]]:
    """Run ``work`` and note ``claiming_due`` at every other loop turn meanwhile."""
    seen: list[int | None] = []
    done = False
    loop = asyncio.get_running_loop()

    def look() -> None:
        if not done:
            seen.append(claimer.claiming_due)
            loop.call_soon(look)

    loop.call_soon(look)
    try:
        return await work, seen
    finally:
        done = True


def test_a_large_pop_takes_loop_turns_and_keeps_the_through_time_before_it():
    fires = _fires(BATCH)
    claimer = _claimer(Table(list(fires)), Dispatcher())
    (popped, _), seen = asyncio.run(_turns_during(claimer._pop(DUE, 0), claimer))
    assert popped == fires
    assert len(seen) >= BATCH // LOOP_CHUNK - 1  # other callbacks ran between chunks
    assert all(due == DUE for due in seen[1:])  # the oldest popped fire, never None


def test_the_handover_goes_highest_priority_first_in_turns_and_completes_if_stopped():
    fires = _fires(BATCH)
    dispatcher = Dispatcher()
    claimer = _claimer(Table([]), dispatcher, ClaimResult(dispatch=list(fires)))
    _, seen = asyncio.run(_turns_during(claimer.claim(fires, [], lead_ms=500), claimer))
    assert [ar.run_id for ar in dispatcher.added] == [
        f.run_id for f in sorted(fires, key=lambda f: (-f.job.priority, f.due_ms))]
    assert len(seen) >= BATCH // LOOP_CHUNK - 1
    assert all(due == DUE for due in seen[1:])  # not through them until all are held
    assert claimer.claiming_due is None and all(ar.mark_start for ar in dispatcher.added)

    async def stopped_midway() -> bool:
        task = asyncio.create_task(claimer.claim(fires, [], lead_ms=500))
        for _ in range(3):
            await asyncio.sleep(0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return task.cancelled()

    dispatcher.added.clear()
    assert asyncio.run(stopped_midway())
    assert len(dispatcher.added) == BATCH  # every claimed fire is held all the same


def test_a_pop_stops_at_a_membership_change():
    """Each fire's first owner was worked out in the view it was popped in:
    a batch popped across a view change stops there (the rest next round)."""

    class Changing(Table):
        def pop_due(self, now_ms, until_ms, limit, *, ahead_ms=0, hold=False):
            got = super().pop_due(now_ms, until_ms, limit, ahead_ms=ahead_ms)
            self.view_key = "w"
            return got

    table = Changing(_fires(BATCH))
    popped, _ = asyncio.run(_claimer(table, Dispatcher())._pop(DUE, 0))
    assert len(popped) == LOOP_CHUNK and len(table.fires) == BATCH - LOOP_CHUNK
