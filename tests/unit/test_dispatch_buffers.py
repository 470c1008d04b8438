"""The overlap buffers' decisions (``dispatch/buffers``) against a host that
records what it is asked: which fire waits, which is replaced or refused,
which goes when the run in flight ends, and runs of other nodes."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from cronman.models import Job, Run
from cronman.scheduler.dispatch import buffers as buffers_mod
from cronman.scheduler.dispatch.buffers import Buffers, buffered
from cronman.scheduler.fires import ActiveRun
from cronman.scheduler.runtime.clock import ReferenceClock
from cronman.timeutil import to_ms
from cronman.vocabulary import BUFFERED_PREFIX

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _job(policy: str, limit: int | None = None) -> Job:
    return Job(id="j1", namespace="ns", name="n", version=1,
               schedule={"kind": "interval", "every": 1}, target={"kind": "http"}, retry={},
               misfire={}, delivery="at_least_once", concurrency=policy, priority=0,
               start_at=None, end_at=None, jitter=None, paused=False, labels={},
               dead_letter=None, created_at=T0, updated_at=T0, buffer_limit=limit)


def _fire(job: Job, i: int) -> ActiveRun:
    t = T0 + timedelta(seconds=i)
    return ActiveRun(run_id=f"r{i}", job=job, scheduled_for=t, due_ms=to_ms(t), attempt=1)


class Host:
    """Holds the runs as the dispatcher would; records the buffers' calls."""

    def __init__(self) -> None:
        self.runs: list[ActiveRun] = []
        self.noted: list[str] = []
        self.skipped: list[tuple[str, str]] = []
        self.released: list[str] = []
        self.buffers: Buffers | None = None

    def in_flight_here(self, job_id: str) -> list[ActiveRun]:
        return [r for r in self.runs if r.job.id == job_id and not r.done and not r.waiting
                and (r.started_at is not None or r.buffer_passed)]

    def note_buffered(self, ar: ActiveRun) -> None:
        self.noted.append(ar.run_id)

    def skip_buffered(self, ar: ActiveRun, error: str) -> None:
        self.skipped.append((ar.run_id, error))
        self.end(ar)

    def release(self, ar: ActiveRun) -> None:
        self.released.append(ar.run_id)
        ar.started_at = T0

    def admit(self, ar: ActiveRun, remote: list[Run] | None = None) -> bool:
        assert self.buffers is not None
        self.runs.append(ar)
        return self.buffers.admit(ar, remote or [])

    def end(self, ar: ActiveRun) -> None:
        assert self.buffers is not None
        ar.done = True
        self.buffers.ended(ar)


def _setup(remote=None) -> tuple[Host, Buffers]:
    host = Host()
    host.buffers = Buffers(host, ReferenceClock(), remote)
    return host, host.buffers


async def _turn() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


def test_buffer_one_keeps_the_latest_and_starts_it_when_the_run_ends():
    async def main() -> None:
        host, bufs = _setup()
        job = _job("buffer_one")
        first, second, third = (_fire(job, i) for i in range(3))
        assert buffered(first) and host.admit(first)
        first.started_at = T0
        assert not host.admit(second) and not host.admit(third)
        assert host.noted == ["r1", "r2"] and bufs.held("j1") == 1
        assert host.skipped == [("r1", "replaced in the buffer by the fire of "
                                       "2026-12-01T12:00:02Z (buffer_one)")]
        assert third.gate["buffered"]["behind"] == ["r0"]
        assert buffers_mod.buffered_error(third) == (
            f"{BUFFERED_PREFIX}waiting for run r0 to end (buffer_one)")
        host.end(first)
        await _turn()
        assert host.released == ["r2"] and bufs.held("j1") == 0
        assert "buffered" not in third.gate and third.gate["buffered_behind"] == ["r0"]
        # Let through, it is in flight: the next fire waits behind it.
        assert not host.admit(_fire(job, 3))

    asyncio.run(main())


def test_buffer_all_keeps_every_fire_in_order_up_to_its_limit():
    async def main() -> None:
        host, bufs = _setup()
        job = _job("buffer_all", limit=2)
        fires = [_fire(job, i) for i in range(5)]
        assert host.admit(fires[0])
        fires[0].started_at = T0
        assert [host.admit(f) for f in fires[1:]] == [False] * 4
        assert bufs.held("j1") == 2
        assert [s[0] for s in host.skipped] == ["r3", "r4"]
        assert "the buffer is full: 2 fires of the job wait (buffer_limit 2)" in host.skipped[0][1]
        for expected in (["r1"], ["r1", "r2"]):
            host.end(next(r for r in host.runs if r.started_at and not r.done))
            await _turn()
            assert host.released == expected
        host.end(fires[2])
        await _turn()
        assert host.released == ["r1", "r2"] and bufs.held("j1") == 0

    asyncio.run(main())


def test_a_held_fire_that_ends_leaves_its_buffer_and_a_done_one_is_passed_over():
    async def main() -> None:
        host, bufs = _setup()
        job = _job("buffer_all")
        a, b, c = (_fire(job, i) for i in range(3))
        assert host.admit(a)
        a.started_at = T0
        assert not host.admit(b) and not host.admit(c)
        host.end(b)  # its job was deleted, say: ended while it waited
        assert bufs.held("j1") == 1
        host.end(a)
        await _turn()
        assert host.released == ["r2"]

    asyncio.run(main())


def test_a_run_in_flight_on_another_node_is_looked_at_until_it_ends(monkeypatch):
    monkeypatch.setattr(buffers_mod, "REMOTE_POLL", 0.01)
    in_flight = [Run(id="elsewhere", job_id="j1", scheduled_for=T0, status="running",
                     node_id="other")]
    looked: list[str] = []

    async def lookup(job_id: str) -> list[Run]:
        looked.append(job_id)
        return list(in_flight)

    async def main() -> None:
        host, bufs = _setup(lookup)
        fire = _fire(_job("buffer_one"), 1)
        assert not host.admit(fire, list(in_flight))
        assert fire.gate["buffered"]["behind"] == ["elsewhere"]
        await asyncio.sleep(0.05)
        assert host.released == [] and looked
        in_flight.clear()  # the other node's run ended
        for _ in range(50):
            await asyncio.sleep(0.01)
            if host.released:
                break
        assert host.released == ["r1"] and bufs.held("j1") == 0

    asyncio.run(main())


def test_manual_runs_retries_and_other_policies_are_never_held():
    job = _job("buffer_one")
    manual = _fire(job, 1)
    manual.origin = "trigger"
    retry = _fire(job, 2)
    retry.started_at = T0
    assert not buffered(manual) and not buffered(retry)
    assert not buffered(_fire(_job("forbid"), 3))
