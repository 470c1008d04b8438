"""The Coordinator contract: cluster membership, fire locks and outcome marks.

Implementations: ``coordination.redis.RedisCoordinator`` (one or more shards,
or Sentinel) and ``coordination.memory.InProcessCoordinator`` (standalone and
tests, with an injectable clock).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """What a node publishes about itself with each heartbeat."""

    id: str
    address: str = ""
    started_at: datetime | None = None
    last_heartbeat: datetime | None = None
    stats: dict[str, Any] = field(default_factory=dict)


class Coordinator(Protocol):
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

    def claim_fires(self, keys: Sequence[tuple[str, int]], ttl_ms: int) -> list[bool]:
        """Try to take the lock of each (job id, fire time in Unix ms), in one
        round trip per shard. True where this caller won; claiming a key this
        coordinator instance already holds answers True again, so a retried
        batch never loses its own locks. Losing is normal: a replica got
        there first. The lock expires after ``ttl_ms``; the
        database fence stays the final word. Raises ``CoordinatorUnavailable``
        when the locks cannot be reached (the caller falls back on the fence)."""

    def start_fires(self, keys: Sequence[tuple[str, int]], ttl_ms: int) -> list[bool]:
        """Mark fires this instance claimed as started, right before their
        first attempt goes out (one round trip per shard for the batch).
        False where a replica took the fire over (``take_over_fires``): the
        caller must not dispatch it. A lock that is gone (expired, Redis
        restarted) or held unstarted by another instance answers True (the
        run row already made the caller the fire's owner) and is marked as
        the caller's. Raises ``CoordinatorUnavailable``."""

    def take_over_fires(self, keys: Sequence[tuple[str, int]], ttl_ms: int) -> list[bool]:
        """Take fires whose lock another instance holds but never started
        (it died, or stalled, between its claim and the due time). True where
        taken: the caller now holds the fire, started, and dispatches it. A
        started fire, one this instance holds, or one whose lock is gone is
        never taken. Raises ``CoordinatorUnavailable``."""

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

    def ping(self) -> bool:
        """Whether the coordinator answers now (for readiness probes). Never raises."""

    def stats(self) -> dict[str, int]:
        """Counters for the node's stats and metrics: ``heartbeats``,
        ``heartbeat_failures``, ``claim_batches``, ``claim_keys``,
        ``unavailable`` (calls that raised ``CoordinatorUnavailable``),
        ``shards``, ``shards_up``; implementations may add more."""

    def close(self) -> None: ...
