"""Placing container runs on worker agents, and watching their placements.

``Placer``: runs waiting for an agent with room, in one queue per node,
higher priority first. One pass reads the live agents once and offers each
waiting run, in priority order, to the agents that fit it (free capacity for
its ``cpu``/``memory_mb``, labels matching its ``selector``), the agents in
rendezvous order of (agent, run id), so that equal runs spread over equal
agents (an agent that let an offer lapse unacknowledged -- dead, its
heartbeat not yet expired -- comes last for a while); ``process`` agents only
get runs whose namespace's host policy allows that runtime. A run that fits no agent keeps its place in the queue and keeps the
agents it could ever fit on from lower-priority runs; passes repeat when a run is
queued, when a placement ends (``kick``) and every ``poll`` seconds.

``Watcher``: one loop per node reads the placements of every run a
delivery waits on, in one directory call per ``poll``, and resolves each
waiter when its placement ends: done (the outcome, taken once), lost (its
deadline passed: an offer never acknowledged, or a lease not renewed),
or gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from cronman.coordination.agents import (
    CANCELLED,
    DONE,
    FENCED,
    LIVE,
    LOST,
    OFFERED,
    PLACED,
    TAKEN,
    AgentDirectory,
    AgentInfo,
    Capacity,
)
from cronman.coordination.ownership import job_hash, node_hash, score
from cronman.errors import CoordinatorUnavailable

log = logging.getLogger(__name__)
T = TypeVar("T")
#: How many offer deadlines an agent that let an offer lapse is offered last.
SUSPECT_FACTOR = 3
#: Runs watched per ``poll`` interval; more stretch the interval up to ``MAX_POLL``.
WATCHES_PER_POLL = 200
MAX_POLL = 2.0
Call = Callable[..., Awaitable[Any]]


@dataclass(slots=True, eq=False)
class Request:
    """A run waiting to be placed."""

    run_id: str
    attempt: int
    priority: int
    cpu: float
    memory_mb: int
    selector: dict[str, str]
    message: dict[str, Any]
    future: asyncio.Future[tuple[str, str]]  # (answer, agent id)
    tried: int = 0
    live_seen: int = field(default=0)
    process_ok: bool = False  # its namespace's host policy allows the process runtime

    def admits(self, agent: AgentInfo) -> bool:
        """Whether the run may go to ``agent`` at all (label selector aside)."""
        return self.process_ok or agent.runtime != "process"


class Placer:
    """The queue of runs waiting for room on an agent (see the module docstring)."""

    def __init__(self, directory: AgentDirectory, call: Call, *, offer_ms: int, keep_ms: int,
                 poll: float = 0.25) -> None:
        self.directory = directory
        self.call = call
        self.offer_ms = offer_ms
        self.keep_ms = keep_ms
        self.poll = poll
        self._queue: list[tuple[int, int, Request]] = []
        self._seq = itertools.count()
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self.last_agents: list[AgentInfo] = []
        # Agents that let an offer lapse (dead, but their heartbeat not yet
        # expired): offered nothing while any other agent fits, until then.
        self._suspects: dict[str, float] = {}

    def suspect(self, agent_id: str) -> None:
        """An offer to ``agent_id`` lapsed unacknowledged: avoid it for a while."""
        loop = asyncio.get_running_loop()
        self._suspects[agent_id] = loop.time() + SUSPECT_FACTOR * self.offer_ms / 1000

    async def place(self, request: Request) -> tuple[str, str]:
        """Queue ``request`` until it is placed (``PLACED``, agent id) or the
        directory answers ``LIVE``/``FENCED``; cancel to give up waiting."""
        heapq.heappush(self._queue, (-request.priority, next(self._seq), request))
        self.kick()
        try:
            return await request.future
        finally:
            if not request.future.done():
                request.future.cancel()

    def kick(self) -> None:
        if self._wake is None:
            self._wake = asyncio.Event()
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def _loop(self) -> None:
        assert self._wake is not None
        while True:
            self._wake.clear()
            self._queue = [e for e in self._queue if not e[2].future.done()]
            heapq.heapify(self._queue)
            if not self._queue:
                return
            try:
                await self._pass()
            except CoordinatorUnavailable as exc:
                log.warning("cannot place container runs now: %s", exc)
            except Exception:
                log.exception("placing container runs failed")
            if any(not e[2].future.done() for e in self._queue):
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.poll)

    async def _pass(self) -> None:
        agents: list[AgentInfo] = await self.call(self.directory.live_agents)
        self.last_agents = agents
        now = asyncio.get_running_loop().time()
        self._suspects = {a: t for a, t in self._suspects.items() if t > now}
        free = {a.id: a.free for a in agents}
        blocked: set[str] = set()  # agents kept for a higher-priority run that waits
        for _, _, req in sorted(self._queue):
            if req.future.done():
                continue
            candidates = [a for a in agents if a.matches(req.selector) and req.admits(a)]
            fitting = [a for a in candidates
                       if a.id not in blocked and free[a.id].holds(req.cpu, req.memory_mb)]
            fitting.sort(key=lambda a: (a.id not in self._suspects,
                                        score(node_hash(a.id), job_hash(req.run_id))),
                         reverse=True)
            placed = False
            for agent in fitting:
                req.tried += 1
                answer = await self.call(self.directory.place, agent.id, req.run_id,
                                         req.attempt, req.cpu, req.memory_mb, req.message,
                                         self.offer_ms, self.keep_ms)
                if answer == PLACED:
                    free[agent.id] = free[agent.id].minus(Capacity(req.cpu, req.memory_mb, 1))
                    if req.future.cancelled():  # its delivery gave up meanwhile: withdraw
                        await self.call(self.directory.request_stop, req.run_id, req.attempt)
                    _resolve(req.future, (PLACED, agent.id))
                    placed = True
                    break
                if answer in (LIVE, FENCED):
                    _resolve(req.future, (answer, agent.id))
                    placed = True
                    break
                # FULL or GONE: our view was stale; try the next one
            if not placed:  # keep the agents it could ever fit on from lower priorities
                blocked.update(a.id for a in candidates
                               if a.capacity.holds(req.cpu, req.memory_mb))


@dataclass(slots=True, eq=False)
class Watch:
    run_id: str
    attempt: int
    future: asyncio.Future[tuple[str, Any]]


class Watcher:
    """Resolves waiters when their run's placement ends (see the module docstring).

    Answers: (``DONE``, outcome dict), (``LOST``, state it was lost in:
    ``offered`` means nothing was started), (``TAKEN``, None: another waiter
    took the outcome), (``CANCELLED``, None), (``"gone"``, None: no placement).
    """

    def __init__(self, directory: AgentDirectory, call: Call, *, poll: float = 0.1,
                 on_end: Callable[[], None] | None = None,
                 on_unacknowledged: Callable[[str], None] | None = None) -> None:
        self.directory = directory
        self.call = call
        self.poll = poll
        self.on_end = on_end
        self.on_unacknowledged = on_unacknowledged
        self._watches: dict[str, list[Watch]] = {}
        self._task: asyncio.Task[None] | None = None

    async def wait(self, run_id: str, attempt: int) -> tuple[str, Any]:
        watch = Watch(run_id, attempt, asyncio.get_running_loop().create_future())
        self._watches.setdefault(run_id, []).append(watch)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._loop())
        try:
            return await watch.future
        finally:
            watches = self._watches.get(run_id, [])
            if watch in watches:
                watches.remove(watch)
            if not watches:
                self._watches.pop(run_id, None)

    async def _loop(self) -> None:
        failures = 0
        while self._watches:
            # Many long runs waited on: read them less often (one call reads all).
            interval = self.poll * max(1.0, len(self._watches) / WATCHES_PER_POLL)
            if failures:
                interval = self.poll * 2**failures
            await asyncio.sleep(min(MAX_POLL, interval))
            run_ids = [r for r, ws in self._watches.items() if ws]
            try:
                found = await self.call(self.directory.placements, run_ids)
                failures = 0
            except CoordinatorUnavailable as exc:
                failures += 1
                log.warning("cannot read container placements: %s", exc)
                continue
            for run_id, placement in zip(run_ids, found, strict=True):
                try:
                    await self._check(run_id, placement)
                except CoordinatorUnavailable as exc:
                    log.warning("cannot settle the placement of run %s: %s", run_id, exc)

    async def _check(self, run_id: str, placement: Any) -> None:
        watches = [w for w in self._watches.get(run_id, []) if not w.future.done()]
        if not watches:
            return
        if placement is None:
            answer: tuple[str, Any] = ("gone", None)
        elif placement.attempt != watches[0].attempt:
            answer = (FENCED, placement.attempt)
        elif placement.state == DONE:
            outcome = await self.call(self.directory.take, run_id)
            answer = (DONE, outcome) if outcome is not None else (TAKEN, None)
        elif placement.state in (TAKEN, CANCELLED, LOST):
            answer = (placement.state, None)
        elif placement.remaining_ms <= 0:
            before = await self.call(self.directory.mark_lost, run_id, placement.attempt)
            if before is None:
                return  # renewed meanwhile, or ended: the next poll tells
            if before == OFFERED and self.on_unacknowledged is not None:
                self.on_unacknowledged(placement.agent_id)
            answer = (LOST, before)
        else:
            return
        for w in watches:
            _resolve(w.future, answer)
        if self.on_end is not None:
            self.on_end()


def _resolve(future: asyncio.Future[T], value: T) -> None:
    if not future.done():
        future.set_result(value)
