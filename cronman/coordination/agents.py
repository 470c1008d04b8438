"""The agent hand-over contract: worker agents, their capacity, and runs placed on them.

Beside the ``Coordinator`` (scheduler membership and fire locks), an
``AgentDirectory`` is where worker agents are members and where a scheduler
node hands a ``container`` run to one of them. Implementations:
``coordination.agents_redis.RedisAgentDirectory`` and
``coordination.agents_memory.InProcessAgentDirectory`` (standalone, tests).

The life of one placement (one run attempt on one agent), all transitions
atomic in the directory::

    place ─► offered ─ack─► running ─finish─► done ─take─► taken
               │  ╰─stop─► cancelled   │ ╰stop─► stopping ─finish─► done
               ╰──── deadline passed ──┴──────── lost (mark_lost) ◄──╯

- ``place`` reserves the run's ``cpu``/``memory_mb`` and a slot on the agent
  (refused when they do not fit what the agent offers minus what it holds)
  and queues a ``start`` message in the agent's inbox. The offer must be
  acknowledged within its deadline.
- The agent ``ack``s before it starts anything; from then on it holds a
  lease on the run and renews it while the container runs (``renew``).
- The fence token is the run's attempt: a placement of a later attempt
  replaces one of an earlier attempt, and the earlier agent's renewals and
  outcome are refused from then on (it kills the container).
- ``finish`` records the outcome and releases the reservation; ``take``
  hands it to exactly one waiter (a sweeper that re-dispatches the run after
  its node died adopts a live placement and takes its outcome in the end,
  instead of starting a second container).
- A placement whose deadline (the offer's, or the lease's) passed is
  ``mark_lost`` by its waiter: the reservation is released, and a returning
  agent finds itself fenced.

Every deadline is judged on the directory's clock (Redis: the server's).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

# Placement states.
OFFERED = "offered"
RUNNING = "running"
STOPPING = "stopping"
DONE = "done"
TAKEN = "taken"
CANCELLED = "cancelled"
LOST = "lost"
LIVE_STATES = (OFFERED, RUNNING, STOPPING)

# Answers of ``place``.
PLACED = "placed"
FULL = "full"  # the agent has no room for it
GONE = "gone"  # the agent is not live
FENCED = "fenced"  # a placement of a later attempt exists
LIVE = "live"  # a live placement of this run exists: adopt it

# Answers of ``renew`` per run.
RENEWED = "ok"
STOP = "stop"  # a stop was requested: stop the container, then finish
# FENCED: the run is no longer this agent's: kill the container, report nothing

CPU_EPSILON = 1e-6


@dataclass(frozen=True, slots=True)
class Capacity:
    """Cores, MiB of memory and container slots."""

    cpu: float = 0.0
    memory_mb: int = 0
    slots: int = 0

    def minus(self, other: Capacity) -> Capacity:
        return Capacity(self.cpu - other.cpu, self.memory_mb - other.memory_mb,
                        self.slots - other.slots)

    def holds(self, cpu: float, memory_mb: int) -> bool:
        """Whether one more run of ``cpu`` cores and ``memory_mb`` fits in this much room."""
        return (self.slots >= 1 and self.cpu + CPU_EPSILON >= cpu
                and self.memory_mb >= memory_mb)

    def to_dict(self) -> dict[str, Any]:
        return {"cpu": round(self.cpu, 3), "memory_mb": self.memory_mb, "slots": self.slots}


@dataclass(frozen=True, slots=True)
class AgentInfo:
    """What an agent publishes with each heartbeat, plus, when read back,
    what is reserved on it (``used``) and when it last beat."""

    id: str
    capacity: Capacity
    labels: dict[str, str] = field(default_factory=dict)
    address: str = ""
    runtime: str = ""
    started_at: datetime | None = None
    running: list[str] = field(default_factory=list)  # run ids of its containers
    used: Capacity = Capacity()
    last_heartbeat: datetime | None = None

    @property
    def free(self) -> Capacity:
        return self.capacity.minus(self.used)

    def matches(self, selector: Mapping[str, str] | None) -> bool:
        return all(self.labels.get(k) == v for k, v in (selector or {}).items())

    def published(self) -> str:
        """The JSON an agent's heartbeat stores."""
        return json.dumps({
            "address": self.address, "runtime": self.runtime, "labels": self.labels,
            "capacity": self.capacity.to_dict(), "running": self.running,
            "started_at": None if self.started_at is None else self.started_at.isoformat(),
        }, separators=(",", ":"))


def agent_from_published(agent_id: str, text: str, used: Capacity,
                         last_heartbeat: datetime | None) -> AgentInfo:
    """The ``AgentInfo`` of a heartbeat's JSON (unreadable parts left empty)."""
    try:
        data = json.loads(text)
    except ValueError:
        data = {}
    if not isinstance(data, dict):
        data = {}
    cap = data.get("capacity") or {}
    started = data.get("started_at")
    return AgentInfo(
        id=agent_id,
        capacity=Capacity(float(cap.get("cpu", 0)), int(cap.get("memory_mb", 0)),
                          int(cap.get("slots", 0))),
        labels={str(k): str(v) for k, v in (data.get("labels") or {}).items()},
        address=str(data.get("address") or ""), runtime=str(data.get("runtime") or ""),
        started_at=datetime.fromisoformat(started) if started else None,
        running=[str(r) for r in data.get("running") or []],
        used=used, last_heartbeat=last_heartbeat)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a run's latest hand-over stands."""

    run_id: str
    attempt: int
    agent_id: str
    state: str
    remaining_ms: int  # until its deadline (offer or lease); <= 0: passed
    has_outcome: bool = False

    @property
    def live(self) -> bool:
        """Offered or held under a lease that has not run out."""
        return self.state in LIVE_STATES and self.remaining_ms > 0


class AgentDirectory(Protocol):
    """Agents as members, and the hand-over of runs to them. Every call may
    raise ``CoordinatorUnavailable``; none blocks longer than its timeout."""

    # -- the agent's side -------------------------------------------------

    def agent_heartbeat(self, agent: AgentInfo, ttl_ms: int) -> None:
        """Publish ``agent`` as live for ``ttl_ms``. Idempotent."""

    def agent_leave(self, agent_id: str) -> None:
        """Remove the agent from the live set at once (its runs keep their leases)."""

    def next_messages(self, agent_id: str, timeout: float) -> list[dict[str, Any]]:
        """The messages queued for the agent (``start``/``stop``), waiting up
        to ``timeout`` seconds for the first; [] when none came."""

    def ack(self, agent_id: str, run_id: str, attempt: int, lease_ms: int) -> bool:
        """Take the lease of an offered run before starting anything. False:
        the offer was withdrawn, cancelled or superseded (start nothing)."""

    def renew(self, agent_id: str, runs: Sequence[tuple[str, int]], lease_ms: int
              ) -> list[str]:
        """Renew the leases of (run id, attempt)s the agent runs: ``RENEWED``,
        ``STOP`` (stop it and finish) or ``FENCED`` (kill it, report nothing)."""

    def finish(self, agent_id: str, run_id: str, attempt: int, outcome: dict[str, Any],
               keep_ms: int) -> bool:
        """Record the run's outcome (kept ``keep_ms``) and release its
        reservation. False when fenced (the outcome is dropped)."""

    def release(self, agent_id: str, run_id: str, attempt: int) -> None:
        """Drop the agent's reservation for a run it will not run."""

    def put_output(self, run_id: str, output: dict[str, Any], ttl_ms: int) -> None:
        """Publish a running container's output so far (``{"attempt",
        "agent_id", "stdout", "stderr", "at"}``) for ``ttl_ms``, replacing the
        run's earlier one."""

    def output(self, run_id: str) -> dict[str, Any] | None:
        """The output an agent published last for the run, while it lasts."""

    # -- the scheduler's side ---------------------------------------------

    def live_agents(self) -> list[AgentInfo]:
        """The live agents with what is reserved on them, sorted by id."""

    def place(self, agent_id: str, run_id: str, attempt: int, cpu: float, memory_mb: int,
              message: dict[str, Any], offer_ms: int, keep_ms: int) -> str:
        """Offer the run to the agent: ``PLACED``, ``FULL``, ``GONE``,
        ``FENCED`` or ``LIVE`` (see the module docstring)."""

    def placements(self, run_ids: Sequence[str]) -> list[Placement | None]:
        """The current placement of each run (None: never placed, or expired)."""

    def take(self, run_id: str) -> dict[str, Any] | None:
        """The outcome of a ``done`` placement, once: the placement becomes
        ``taken``. None when there is none (not done, or taken already)."""

    def mark_lost(self, run_id: str, attempt: int) -> str | None:
        """End a placement whose deadline passed (its agent stopped renewing,
        or never acknowledged): returns the state it was in (``offered``
        means that nothing was started), None when it was not so."""

    def request_stop(self, run_id: str, attempt: int) -> str | None:
        """Ask for the run's container to be stopped: an offer is withdrawn
        (``cancelled``), a running one is told to stop (``stopping``). Returns
        the new state, None when the placement was not live."""
