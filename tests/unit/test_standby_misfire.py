"""A second owner whose first owner is gone takes over every fire it watched
for it, those older than their grace as the job's misfire policy says: the
first owner may have held them back unclaimed (a dispatch far behind), so a
fire dropped here would be lost."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from cronman.scheduler.claim.pulse import Progress
from cronman.scheduler.claim.standby import WATCH_MAX_MS, Standby, Watched
from cronman.scheduler.fires import Fire
from cronman.scheduler.runtime.clock import ReferenceClock
from cronman.scheduler.runtime.lifecycle import Lifecycle
from cronman.scheduler.runtime.metrics import NodeMetrics
from tests.unit.test_node_jobtable import make_job


class _View:
    view_key = "v"  # the membership view the standby's fires are reckoned on


class Pulses:
    """The first owner's pulse: none (gone), or in charge through ``through_ms``."""

    known = True

    def __init__(self, through_ms: int | None = None) -> None:
        self.through_ms = through_ms

    def progress_of(self, node_id: str) -> Progress | None:
        if self.through_ms is None:
            return None
        return Progress(view="v", ready=True, through_ms=self.through_ms, stalled=False)

    def alive_nodes(self) -> list[str]:
        return []


class Taking(Standby):
    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.taken: list[tuple[Fire, str]] = []

    async def _take_over(self, watched: list[Watched], claim_absent: bool,
                         reason: str) -> None:
        self.taken += [(w.fire, reason) for w in watched]


def _standby(pulses: Pulses, clock: ReferenceClock) -> Taking:
    return Taking(node_id="b", coordinator=None, runs=None, dispatcher=None, writer=None,
                  pulses=pulses, view=_View(), lease_seconds=30.0, clock=clock,
                  pool=None, lifecycle=Lifecycle(), metrics=NodeMetrics(CollectorRegistry()))


def _deferred(s: Standby, job_id: str, policy: str, ages_s: list[int], now: int) -> None:
    job = make_job(job_id, policy=policy, grace=3)
    s.defer([Fire(job, now - age * 1000, now - age * 1000, primary="a") for age in ages_s])


def _skipped(s: Standby) -> float:
    return s._metrics.misfires_skipped._value.get()


@pytest.mark.parametrize(("policy", "taken_ages", "skipped_before", "skipped"), [
    ("fire_once", [8, 1], [2, 0], 2),
    ("fire_all", [10, 9, 8, 1], [0, 0, 0, 0], 0),
    ("skip", [1], [3], 3)])
def test_a_gone_owners_fires_past_grace_follow_the_misfire_policy(
        policy, taken_ages, skipped_before, skipped):
    clock = ReferenceClock()
    now = clock.now_ms()
    s = _standby(Pulses(), clock)
    _deferred(s, "job", policy, [10, 9, 8, 1], now)
    asyncio.run(s.scan())
    taken = sorted(s.taken, key=lambda t: t[0].fire_ms)
    assert [round((now - f.fire_ms) / 1000) for f, _ in taken] == taken_ages
    assert [f.skipped_before for f, _ in taken] == skipped_before
    assert {reason for _, reason in taken} == {"gone"}
    assert _skipped(s) == skipped
    assert s.watching == 0


def test_a_gone_owners_fires_watched_longer_than_the_watch_limit_are_taken_too():
    clock = ReferenceClock()
    now = clock.now_ms()
    s = _standby(Pulses(), clock)
    age = WATCH_MAX_MS // 1000 + 10
    _deferred(s, "job", "fire_all", [age, age - 1], now)
    asyncio.run(s.scan())
    assert len(s.taken) == 2


def test_fires_an_owner_in_charge_came_through_past_their_grace_are_its_own():
    """The first owner came through them: it fired them, or its misfire
    policy passed over them; nothing to look at."""
    clock = ReferenceClock()
    now = clock.now_ms()
    s = _standby(Pulses(through_ms=now), clock)
    _deferred(s, "job", "fire_all", [10, 9, 1], now)
    asyncio.run(s.scan())
    assert [round((now - f.fire_ms) / 1000) for f, _ in s.taken] == [1]
    assert _skipped(s) == 0


def test_fires_an_owner_in_charge_has_not_come_through_are_kept_watched():
    clock = ReferenceClock()
    now = clock.now_ms()
    s = _standby(Pulses(through_ms=now - 20_000), clock)
    _deferred(s, "job", "fire_all", [10, 9, 1], now)
    asyncio.run(s.scan())
    assert s.taken == [] and s.watching == 3
