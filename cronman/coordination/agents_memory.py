"""In-process agent directory: agents and placements in memory.

For ``cronman standalone`` (one node and a ``process`` agent in one process)
and tests. The same rules as the Redis directory (``coordination.agents``),
on an injectable clock (seconds), under one lock; ``next_messages`` waits on
a condition variable.
"""

from __future__ import annotations

import copy
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from cronman.coordination.agents import (
    CANCELLED,
    DONE,
    FENCED,
    FULL,
    GONE,
    LIVE,
    LIVE_STATES,
    LOST,
    OFFERED,
    PLACED,
    RENEWED,
    RUNNING,
    STOP,
    STOPPING,
    TAKEN,
    AgentInfo,
    Capacity,
    Placement,
)
from cronman.timeutil import utcnow


@dataclass(slots=True)
class _Placement:
    attempt: int
    agent_id: str
    state: str
    deadline: float
    cpu: float
    memory_mb: int
    expires: float
    outcome: dict[str, Any] | None = None


class InProcessAgentDirectory:
    """An ``AgentDirectory`` whose agents and placements live in this process."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._anchor = (clock(), utcnow())
        self._lock = threading.Condition()
        self._agents: dict[str, tuple[AgentInfo, float, float]] = {}  # info, beat, deadline
        self._reserved: dict[str, dict[str, tuple[float, int, int]]] = {}
        self._inbox: dict[str, deque[dict[str, Any]]] = {}
        self._placements: dict[str, _Placement] = {}
        self._outputs: dict[str, tuple[dict[str, Any], float]] = {}  # run id -> (output, until)

    def _wall(self, t: float) -> datetime:
        mono, wall = self._anchor
        return wall + timedelta(seconds=t - mono)

    def _live(self, agent_id: str, now: float) -> bool:
        entry = self._agents.get(agent_id)
        return entry is not None and entry[2] > now

    def _placement(self, run_id: str, now: float) -> _Placement | None:
        p = self._placements.get(run_id)
        if p is not None and p.expires <= now:
            del self._placements[run_id]
            return None
        return p

    def _unreserve(self, agent_id: str, run_id: str, attempt: int | None = None) -> None:
        held = self._reserved.get(agent_id, {})
        entry = held.get(run_id)
        if entry is not None and (attempt is None or entry[2] == attempt):
            del held[run_id]

    def _push(self, agent_id: str, message: dict[str, Any]) -> None:
        self._inbox.setdefault(agent_id, deque()).append(message)
        self._lock.notify_all()

    # -- the agent's side -------------------------------------------------

    def agent_heartbeat(self, agent: AgentInfo, ttl_ms: int) -> None:
        with self._lock:
            now = self._clock()
            self._agents[agent.id] = (agent, now, now + ttl_ms / 1000.0)

    def agent_leave(self, agent_id: str) -> None:
        with self._lock:
            self._agents.pop(agent_id, None)

    def next_messages(self, agent_id: str, timeout: float) -> list[dict[str, Any]]:
        with self._lock:
            box = self._inbox.setdefault(agent_id, deque())
            if not box:
                self._lock.wait(timeout)
            out = list(box)
            box.clear()
        return [copy.deepcopy(m) for m in out]

    def ack(self, agent_id: str, run_id: str, attempt: int, lease_ms: int) -> bool:
        with self._lock:
            now = self._clock()
            p = self._placement(run_id, now)
            if (p is None or p.agent_id != agent_id or p.attempt != attempt
                    or p.state != OFFERED or p.deadline <= now):
                self._unreserve(agent_id, run_id, attempt)
                return False
            p.state = RUNNING
            p.deadline = now + lease_ms / 1000.0
            return True

    def renew(self, agent_id: str, runs: Sequence[tuple[str, int]], lease_ms: int
              ) -> list[str]:
        out = []
        with self._lock:
            now = self._clock()
            for run_id, attempt in runs:
                p = self._placement(run_id, now)
                if (p is None or p.agent_id != agent_id or p.attempt != attempt
                        or p.state not in LIVE_STATES):
                    out.append(FENCED)
                    continue
                if p.state != OFFERED:
                    p.deadline = now + lease_ms / 1000.0
                out.append(STOP if p.state == STOPPING else RENEWED)
        return out

    def finish(self, agent_id: str, run_id: str, attempt: int, outcome: dict[str, Any],
               keep_ms: int) -> bool:
        with self._lock:
            now = self._clock()
            p = self._placement(run_id, now)
            self._unreserve(agent_id, run_id, attempt)
            if (p is None or p.agent_id != agent_id or p.attempt != attempt
                    or p.state not in (RUNNING, STOPPING)):
                return False
            p.state = DONE
            p.outcome = copy.deepcopy(outcome)
            p.expires = now + keep_ms / 1000.0
            return True

    def release(self, agent_id: str, run_id: str, attempt: int) -> None:
        with self._lock:
            self._unreserve(agent_id, run_id, attempt)

    # -- the scheduler's side ---------------------------------------------

    def live_agents(self) -> list[AgentInfo]:
        with self._lock:
            now = self._clock()
            for agent_id in [a for a, (_, _, d) in self._agents.items() if d <= now]:
                del self._agents[agent_id]
            out = []
            for agent_id, (info, beat, _) in self._agents.items():
                held = self._reserved.get(agent_id, {}).values()
                used = Capacity(sum(c for c, _, _ in held), sum(m for _, m, _ in held),
                                len(held))
                out.append(replace(info, used=used, last_heartbeat=self._wall(beat)))
        out.sort(key=lambda a: a.id)
        return out

    def place(self, agent_id: str, run_id: str, attempt: int, cpu: float, memory_mb: int,
              message: dict[str, Any], offer_ms: int, keep_ms: int) -> str:
        with self._lock:
            now = self._clock()
            entry = self._agents.get(agent_id)
            if entry is None or entry[2] <= now:
                return GONE
            p = self._placement(run_id, now)
            if p is not None:
                if p.attempt > attempt:
                    return FENCED
                if p.state in LIVE_STATES and p.deadline > now:
                    return LIVE
                self._unreserve(p.agent_id, run_id)
            held = self._reserved.setdefault(agent_id, {})
            used = Capacity(sum(c for c, _, _ in held.values()),
                            sum(m for _, m, _ in held.values()), len(held))
            if not entry[0].capacity.minus(used).holds(cpu, memory_mb):
                return FULL
            held[run_id] = (cpu, memory_mb, attempt)
            self._placements[run_id] = _Placement(
                attempt=attempt, agent_id=agent_id, state=OFFERED,
                deadline=now + offer_ms / 1000.0, cpu=cpu, memory_mb=memory_mb,
                expires=now + keep_ms / 1000.0)
            self._push(agent_id, copy.deepcopy(message))
            return PLACED

    def placements(self, run_ids: Sequence[str]) -> list[Placement | None]:
        with self._lock:
            now = self._clock()
            out: list[Placement | None] = []
            for run_id in run_ids:
                p = self._placement(run_id, now)
                out.append(None if p is None else Placement(
                    run_id=run_id, attempt=p.attempt, agent_id=p.agent_id, state=p.state,
                    remaining_ms=int((p.deadline - now) * 1000),
                    has_outcome=p.outcome is not None))
        return out

    def take(self, run_id: str) -> dict[str, Any] | None:
        with self._lock:
            p = self._placement(run_id, self._clock())
            if p is None or p.state != DONE or p.outcome is None:
                return None
            p.state = TAKEN
            return copy.deepcopy(p.outcome)

    def mark_lost(self, run_id: str, attempt: int) -> str | None:
        with self._lock:
            now = self._clock()
            p = self._placement(run_id, now)
            if (p is None or p.attempt != attempt or p.state not in LIVE_STATES
                    or p.deadline > now):
                return None
            before = p.state
            p.state = LOST
            self._unreserve(p.agent_id, run_id, attempt)
            return before

    def request_stop(self, run_id: str, attempt: int) -> str | None:
        with self._lock:
            p = self._placement(run_id, self._clock())
            if p is None or p.attempt != attempt:
                return None
            if p.state == OFFERED:
                p.state = CANCELLED
                self._unreserve(p.agent_id, run_id, attempt)
                return CANCELLED
            if p.state == RUNNING:
                p.state = STOPPING
                self._push(p.agent_id, {"kind": "stop", "run_id": run_id, "attempt": attempt})
                return STOPPING
            return p.state if p.state == STOPPING else None

    def put_output(self, run_id: str, output: dict[str, Any], ttl_ms: int) -> None:
        with self._lock:
            now = self._clock()
            self._outputs = {k: v for k, v in self._outputs.items() if v[1] > now}
            self._outputs[run_id] = (dict(output), now + ttl_ms / 1000.0)

    def output(self, run_id: str) -> dict[str, Any] | None:
        with self._lock:
            found = self._outputs.get(run_id)
            return dict(found[0]) if found and found[1] > self._clock() else None

    def close(self) -> None:
        with self._lock:
            self._lock.notify_all()
