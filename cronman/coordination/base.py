"""The Coordinator contract: cluster membership, fire locks and outcome marks.

Implementations: ``coordination.redis.RedisCoordinator`` (one or more shards,
or Sentinel) and ``coordination.memory.InProcessCoordinator`` (standalone and
tests, with an injectable clock).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

# Answers of ``Coordinator.claim_fires``.
HELD = 0
CLAIMED = 1
TOO_EARLY = 3

# Answers of ``Coordinator.take_over_fires``.
NOT_TAKEN = 0
TAKEN = 1
HOLDER_ALIVE = 2
ABSENT = 4


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """What a node publishes about itself with each heartbeat."""

    id: str
    address: str = ""
    started_at: datetime | None = None
    last_heartbeat: datetime | None = None
    stats: dict[str, Any] = field(default_factory=dict)


# A node whose oldest due fire has waited this long is overloaded: alive
# (heartbeating) and working, but behind -- never down. Its heartbeat stats
# carry how far behind it is (``behind_ms``).
OVERLOADED_BEHIND_MS = 1000

# The most membership changes a coordinator keeps (the oldest are dropped).
MEMBERSHIP_LOG_MAX = 1000
# Kinds of membership change.
JOINED, LEFT, EXPIRED = "joined", "left", "expired"


@dataclass(frozen=True, slots=True)
class MembershipChange:
    """A node joined, left (a clean stop) or expired (its heartbeats stopped:
    dated by its deadline, the moment it stopped counting as live)."""

    node_id: str
    kind: str  # JOINED, LEFT or EXPIRED
    at: datetime
    started_at: datetime | None = None
    address: str = ""


@dataclass(frozen=True, slots=True)
class Pulse:
    """A node's latest pulse: when it was written (the coordinator's clock,
    Unix ms) and what it said."""

    node_id: str
    at_ms: int
    payload: str


@dataclass(frozen=True, slots=True)
class PulseReading:
    """What one pulse round trip learnt: the coordinator's time, read between
    the local monotonic times ``sent`` and ``received`` (``time.monotonic()``
    seconds: a step of this host's wall clock cannot bend the round trip),
    and the peers' pulses found."""

    server_ms: int
    sent: float
    received: float
    pulses: dict[str, Pulse]


class Coordinator(Protocol):
    @property
    def shared(self) -> bool:
        """Whether other processes share this coordinator's membership and
        locks (Redis). An in-process one only coordinates nodes of its own
        process, all of which are there from the start."""

    def join(self, node: NodeInfo) -> None:
        """Announce ``node`` as live. Idempotent; the same as a first heartbeat."""

    def heartbeat(self, node: NodeInfo) -> None:
        """Refresh the node's membership. A node whose last heartbeat is older
        than the heartbeat TTL no longer counts as live for anyone. Raises
        ``CoordinatorUnavailable`` when no shard took the heartbeat."""

    def leave(self, node_id: str) -> None:
        """Remove the node at once (clean shutdown). Idempotent."""

    def live_members(self) -> list[NodeInfo]:
        """The live nodes, sorted by id. Raises ``CoordinatorUnavailable`` when
        the membership cannot be read; callers then keep their last view."""

    def membership_changes(self, since: datetime) -> list[MembershipChange]:
        """The membership changes at or after ``since``, newest first, from a
        bounded history (the last ``MEMBERSHIP_LOG_MAX`` changes). Members
        found expired are recorded first. Raises ``CoordinatorUnavailable``."""

    def claim_fires(self, keys: Sequence[tuple[str, int]], ttl_ms: int, *,
                    max_ahead_ms: int | None = None) -> list[int]:
        """Try to take the lock of each (job id, fire time in Unix ms), in one
        round trip per shard. Per key: ``CLAIMED`` (1) where this caller won
        -- claiming a key this coordinator instance already holds answers it
        again, so a retried batch never loses its own locks --; ``HELD`` (0)
        where another holder has it (normal: a replica got there first);
        ``TOO_EARLY`` (3) where the fire time is more than ``max_ahead_ms``
        ahead of the coordinator's clock (the caller's clock runs fast). The
        lock expires after ``ttl_ms``; the database fence stays the final
        word. Raises ``CoordinatorUnavailable`` when the locks cannot be
        reached (the caller falls back on the fence)."""

    def start_fires(self, keys: Sequence[tuple[str, int]], ttl_ms: int, *,
                    due_ms: Sequence[int] | None = None,
                    early_ms: int | None = None) -> list[int]:
        """Mark fires this instance claimed as started, right before their
        first attempt goes out (one round trip per shard for the batch).
        Per key: 1 (go); 0 where a replica took the fire over
        (``take_over_fires``): the caller must not dispatch it; with
        ``due_ms`` (each fire's due time; for one marked ahead, the caller's
        clock's now) and ``early_ms``, a negative number -n where that time is
        n ms from now by the coordinator's clock, more than ``early_ms`` away:
        nothing is marked, the caller waits and asks again. A lock that is
        gone (expired, Redis restarted) or held unstarted by another instance
        is marked as the caller's and answers 2: the lock cannot vouch for
        the caller, the run row must (a replica may have taken the fire over
        while the caller stalled, and that started lock expired since). A
        started lock expires ``ttl_ms`` after its start. Raises
        ``CoordinatorUnavailable``."""

    def take_over_fires(self, keys: Sequence[tuple[str, int]], ttl_ms: int, *,
                        alive: Collection[str] = (), report_absent: bool = False) -> list[int]:
        """Take fires whose lock another instance holds but never started
        (it died, or stalled, between its claim and the due time), one round
        trip per shard. Per key: ``TAKEN`` (1): the caller now holds the fire,
        started (for ``ttl_ms`` from now), and dispatches it;
        ``HOLDER_ALIVE`` (2): its holder is one of the ``alive`` node ids and
        has not started it yet -- it is late, not gone: ask again later; ``NOT_TAKEN`` (0): started (by anyone), held
        by this instance, or without a lock. With ``report_absent`` a fire
        without a lock answers ``ABSENT`` (4) instead, and nothing is
        written: a second owner that watched it may claim it through the run
        row's fence (nobody claimed it -- or Redis lost its lock, which only
        the row can tell). Raises ``CoordinatorUnavailable``."""

    def pulse(self, node_id: str, payload: str, ttl_ms: int,
              peers: Sequence[str]) -> PulseReading:
        """Write this node's pulse (stamped with the coordinator's clock, kept
        ``ttl_ms``) and read the latest pulse of each of ``peers``, in one
        round trip per shard. Nodes pulse several times a second: a pulse
        tells that a node's event loop turns and what its dispatch is doing
        (``payload``), and the reading is the node's sample of the cluster's
        reference clock. Raises ``CoordinatorUnavailable``."""

    def mark_outcomes(self, marks: Sequence[tuple[str, int, str]], ttl_ms: int) -> None:
        """Record an outcome mark per (run id, attempt, mark text) for ``ttl_ms``
        (``outcome_marks``: how an attempt of the run ended, so that a sweeper
        need not send the run again), in one round trip per shard. A mark
        replaces the run's stored one unless that one is of a later attempt.
        Raises ``CoordinatorUnavailable`` (the marks are then not recorded)."""

    def read_outcomes(self, run_ids: Sequence[str]) -> list[str | None]:
        """The mark text stored for each run id (None where there is none, or
        its shard is unreachable), in one round trip per shard. Raises
        ``CoordinatorUnavailable`` when no shard answered."""

    async def astart_fires(self, keys: Sequence[tuple[str, int]], ttl_ms: int, *,
                           due_ms: Sequence[int] | None = None,
                           early_ms: int | None = None) -> list[int]:
        """``start_fires`` on the event loop (no thread: a node marks starts
        several times a millisecond at high rates)."""

    async def amark_outcomes(self, marks: Sequence[tuple[str, int, str]], ttl_ms: int) -> None:
        """``mark_outcomes`` on the event loop."""

    async def aclose(self) -> None:
        """Close what the event-loop calls opened (on that loop)."""

    def ping(self) -> bool:
        """Whether the coordinator answers now (for readiness probes). Never raises."""

    def stats(self) -> dict[str, int]:
        """Counters for the node's stats and metrics: ``heartbeats``,
        ``heartbeat_failures``, ``claim_batches``, ``claim_keys``,
        ``unavailable`` (calls that raised ``CoordinatorUnavailable``),
        ``shards``, ``shards_up``; implementations may add more."""

    def close(self) -> None: ...
