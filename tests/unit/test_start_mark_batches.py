"""Start marks go one marker call at a time (per lane): runs that fall due
while a call is out are marked together in the next one. A slow marker (the database,
while the coordinator is down) thus keeps up by marking more per call,
instead of queueing one small call per loop turn behind it. Runs above the
default priority have a lane of their own: they do not wait for a call out
for the others."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from prometheus_client import CollectorRegistry

from cronman.callbacks import TargetRegistry
from cronman.callbacks.recording import RecordingTarget
from cronman.scheduler.active import ActiveRun
from cronman.scheduler.claims import Fire
from cronman.scheduler.clock import ReferenceClock
from cronman.scheduler.dispatch import Dispatcher
from cronman.scheduler.metrics import NodeMetrics
from cronman.scheduler.start_marks import START_GO, StartMarker
from cronman.scheduler.writer import ResultWriter
from tests.support.store_data import job_spec
from tests.unit.test_dispatch_order import NoneHeld, store  # noqa: F401  (fixture)

RUNS = 200
SPACING_MS = 1  # one run falls due every millisecond...
MARK_S = 0.05  # ...and a marker call takes 50 ms


@contextlib.asynccontextmanager
async def marking_dispatcher(stored: Any, target: RecordingTarget, marker: StartMarker,
                             max_in_flight: int) -> AsyncIterator[Dispatcher]:
    """A dispatcher writing to ``stored``, sending to ``target``, marking
    starts through ``marker``."""
    clock = ReferenceClock()
    metrics = NodeMetrics(CollectorRegistry())
    with ThreadPoolExecutor(1) as pool:
        writer = ResultWriter(stored.runs, pool, metrics, node_id="n1", clock=clock)
        yield Dispatcher(node_id="n1", targets=TargetRegistry([target]), writer=writer,
                         metrics=metrics, clock=clock, max_in_flight=max_in_flight,
                         lease_seconds=30.0, jobs=NoneHeld(), start_marker=marker)


class SlowMarker:
    """A marker that takes ``MARK_S`` per call, and counts the calls out at once."""

    def __init__(self) -> None:
        self.batches: list[int] = []
        self.out = 0
        self.most_out = 0

    async def __call__(self, runs: list[ActiveRun]) -> list[int]:
        self.batches.append(len(runs))
        self.out += 1
        self.most_out = max(self.most_out, self.out)
        try:
            await asyncio.sleep(MARK_S)
        finally:
            self.out -= 1
        return [START_GO] * len(runs)


def test_runs_due_while_a_mark_is_out_go_in_the_next_call(store) -> None:  # noqa: F811
    (job,) = store.jobs.create_jobs([job_spec("marked")])
    target = RecordingTarget("http")
    marker = SlowMarker()

    async def main() -> None:
        async with marking_dispatcher(store, target, marker, RUNS) as d:
            first = d.clock.now_ms() + 20
            for i in range(RUNS):
                due = first + i * SPACING_MS
                d.add(ActiveRun.of_fire(Fire(job=job, fire_ms=due, due_ms=due),
                                        mark_start=True))
            await target.wait_for(RUNS, timeout=30)
            await d.wait_side_tasks(5)

    asyncio.run(main())
    assert sum(marker.batches) == RUNS  # every run marked once, none lost between calls
    assert marker.most_out == 1
    # 200 ms of due times at 50 ms a call: a handful of calls, not one per turn.
    assert len(marker.batches) <= 10, marker.batches


class LaneMarker:
    """A marker slow for default-priority runs and quick for raised ones."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, ...]] = []

    async def __call__(self, runs: list[ActiveRun]) -> list[int]:
        self.calls.append(tuple(ar.job.priority for ar in runs))
        await asyncio.sleep(0.001 if runs[0].job.priority > 0 else 0.5)
        return [START_GO] * len(runs)


def test_a_raised_priority_does_not_wait_for_a_call_out_for_the_others(store) -> None:  # noqa: F811
    low, high = store.jobs.create_jobs([job_spec("low"), job_spec("high", priority=10)])
    target = RecordingTarget("http")
    marker = LaneMarker()

    async def main() -> None:
        async with marking_dispatcher(store, target, marker, 100) as d:
            now = d.clock.now_ms()
            for i in range(50):  # their call is out for 500 ms...
                d.add(ActiveRun.of_fire(Fire(job=low, fire_ms=now + i, due_ms=now + 20),
                                        mark_start=True))
            # ...when a raised-priority run falls due
            d.add(ActiveRun.of_fire(Fire(job=high, fire_ms=now + 60, due_ms=now + 60),
                                    mark_start=True))
            await target.wait_for(51, timeout=10)
            await d.wait_side_tasks(5)

    asyncio.run(main())
    assert (10,) in marker.calls  # a call of its own
    assert sorted(p for call in marker.calls for p in call) == [0] * 50 + [10]
    sent = [dl.priority for dl in target.deliveries]
    assert sent[0] == 10, sent  # sent before the call out for the others came back
