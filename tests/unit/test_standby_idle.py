"""The standby watching nothing is not woken by every pulse (an idle node's
loop turns for its pulses only); a fire deferred to it is looked at on the
next pulse as before, and taken over when its first owner is gone."""

from __future__ import annotations

import asyncio
from typing import Any

from prometheus_client import CollectorRegistry

from cronman.scheduler.claim.standby import Standby, Watched
from cronman.scheduler.fires import Fire
from cronman.scheduler.runtime.clock import ReferenceClock
from cronman.scheduler.runtime.lifecycle import Lifecycle
from cronman.scheduler.runtime.metrics import NodeMetrics
from tests.unit.test_duequeue import _job


class _View:
    view_key = "v"  # the membership view the standby's fires are reckoned on


class GonePrimary:
    """Pulses in which the first owner no longer shows."""

    known = True

    def progress_of(self, node_id: str) -> None:
        return None

    def alive_nodes(self) -> list[str]:
        return []


class CountingStandby(Standby):
    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.scans = 0
        self.taken: list[Fire] = []

    async def scan(self) -> None:
        self.scans += 1
        await super().scan()

    async def _take_over(self, watched: list[Watched], claim_absent: bool,
                         reason: str) -> None:
        self.taken += [w.fire for w in watched]


def test_an_idle_standby_sleeps_through_pulses_and_wakes_for_a_deferred_fire() -> None:
    clock = ReferenceClock()
    life = Lifecycle()

    async def main() -> CountingStandby:
        s = CountingStandby(node_id="b", coordinator=None, runs=None, dispatcher=None,
                            writer=None, pulses=GonePrimary(), view=_View(),
                            lease_seconds=30.0, clock=clock, pool=None, lifecycle=life,
                            metrics=NodeMetrics(CollectorRegistry()))
        task = asyncio.create_task(s.run())
        for _ in range(5):  # five pulses, nothing watched
            s.wake()
            await asyncio.sleep(0.01)
        idle_scans = s.scans
        now = clock.now_ms()
        s.defer([Fire(_job("deferred"), now - 2000, now - 2000, primary="a")])
        s.wake()  # the next pulse
        for _ in range(50):
            await asyncio.sleep(0.01)
            if s.taken:
                break
        life.stop()
        s.wake()
        await asyncio.wait_for(task, 2.0)
        assert idle_scans == 0
        return s

    s = asyncio.run(main())
    assert [f.job.name for f in s.taken] == ["deferred"]
