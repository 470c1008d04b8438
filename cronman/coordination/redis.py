"""Redis coordinator: membership, fire locks and outcome marks on one or more
Redis shards or Sentinel.

Key layout (``P`` = ``settings.redis_key_prefix``, ``cronman`` by default)::

    P:members                    sorted set   node id -> heartbeat deadline, Unix ms of
                                              the Redis server's clock (last beat + ttl)
    P:member:{node_id}           hash         id, address, started_at (Unix ms or ""),
                                              last_heartbeat (server Unix ms), ttl_ms,
                                              stats (JSON); PEXPIRE ttl
    P:lock:{job_id}:{fire_ms}    string       holder "{node_id}/{instance token}" once
                                              claimed (SET NX PX lock ttl), "!" + holder
                                              once started (start.lua, takeover.lua;
                                              PX lock ttl again from then)
    P:outcome:{run_id}           string       "{attempt}|{mark}": how the run's latest
                                              attempt ended (outcome_marks), PX a few
                                              leases (mark.lua keeps the latest attempt)
    P:pulse:{node_id}            string       "{server Unix ms}|{payload}": the node's
                                              latest pulse (several a second), PX a
                                              few pulses; on every shard (pulse.lua)
    P:membership                 stream       the membership changes: kind (joined, left,
                                              expired), node, at (server ms), started_at,
                                              address; XADD MAXLEN ~ 1000 by heartbeat.lua,
                                              leave.lua and changes.lua; on every shard

The scripts beside this module (``heartbeat.lua``, ``members.lua``, ``leave.lua``,
``changes.lua``, ``claim.lua``, ``start.lua``, ``takeover.lua``, ``mark.lua``,
``pulse.lua``; ``redis_scripts``) make each operation one atomic round trip
per shard. They touch keys they build from ARGV, so they suit plain Redis and
Sentinel, not Redis Cluster. Redis >= 5 is required (scripts that read TIME
and then write).

Clocks: every timestamp is the Redis server's ``TIME``, read inside the script.
A node's own clock never decides whether a member is live, so nodes with
skewed clocks still agree; the deadline is stored per member, so a node whose
TTL is configured differently is judged by its own TTL.

Shards (several comma-separated URLs): membership is written to every
reachable shard and read as the union, a member being live when any reachable
shard holds a fresh heartbeat (the latest one wins). A node that left while a
shard was down may show up there again until its deadline passes. Each lock
(and each outcome mark) goes to the highest-weighted reachable shard for its
key (``redis_placement``). When a shard
is down its locks move to the next shard in the key's order: during that
window two nodes may disagree on where a lock lives and both win it; the run
row's uniqueness in the database is what prevents the double fire then.
A Redis restart or a Sentinel failover may likewise drop locks not yet
persisted or replicated, with the same fence behind them.

``CoordinatorUnavailable`` is raised when no shard answered; callers keep
their last membership view and fall back on the database fence.

``RedisCoordinator`` puts together the parts, each in its module: the key
names (``redis_keys``), the shards with their scripts and counters
(``redis_shardset``), membership (``redis_membership``), fire locks
(``redis_locks``), outcome marks (``redis_marks``) and pulses (``redis_pulses``).
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from datetime import datetime

from cronman.config import Settings
from cronman.coordination.base import MembershipChange, NodeInfo, PulseReading
from cronman.coordination.redis_keys import RedisKeys
from cronman.coordination.redis_locks import FireLocks
from cronman.coordination.redis_marks import OutcomeMarks
from cronman.coordination.redis_membership import RedisMembership
from cronman.coordination.redis_pulses import RedisPulses
from cronman.coordination.redis_shards import (
    DEFAULT_BACKOFF,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_MAX_BACKOFF,
    DEFAULT_SOCKET_TIMEOUT,
    Shard,
    build_shards,
)
from cronman.coordination.redis_shardset import CLAIM_CHUNK as CLAIM_CHUNK
from cronman.coordination.redis_shardset import ShardSet


class RedisCoordinator:
    """A ``Coordinator`` on the Redis shards (or Sentinel) of ``settings.redis_url``.

    Thread-safe: the scheduler may heartbeat and claim from different threads.
    """

    shared = True

    def __init__(
        self,
        settings: Settings,
        *,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        socket_timeout: float = DEFAULT_SOCKET_TIMEOUT,
        backoff: float = DEFAULT_BACKOFF,
        max_backoff: float = DEFAULT_MAX_BACKOFF,
    ) -> None:
        if not settings.redis_url:
            raise ValueError("RedisCoordinator needs CRONMAN_REDIS_URL")
        self.shards: list[Shard] = build_shards(
            settings.redis_url,
            connect_timeout=connect_timeout,
            socket_timeout=socket_timeout,
            backoff=backoff,
            max_backoff=max_backoff,
        )
        self._set = ShardSet(self.shards)
        keys = RedisKeys(settings.redis_key_prefix)
        self._membership = RedisMembership(
            self._set, keys, ttl_ms=max(1, int(settings.heartbeat_ttl * 1000)))
        self._locks = FireLocks(self._set, keys,
                                holder=f"{settings.node_id}/{uuid.uuid4().hex[:12]}")
        self._marks = OutcomeMarks(self._set, keys)
        self._pulses = RedisPulses(self._set, keys)

    def __repr__(self) -> str:
        return f"RedisCoordinator(shards={[s.name for s in self.shards]!r})"

    # -- membership ------------------------------------------------------

    def join(self, node: NodeInfo) -> None:
        self._membership.heartbeat(node)

    def heartbeat(self, node: NodeInfo) -> None:
        self._membership.heartbeat(node)

    def leave(self, node_id: str) -> None:
        self._membership.leave(node_id)

    def live_members(self) -> list[NodeInfo]:
        return self._membership.live_members()

    def membership_changes(self, since: datetime) -> list[MembershipChange]:
        return self._membership.membership_changes(since)

    # -- fire locks ------------------------------------------------------

    def claim_fires(self, keys: Sequence[tuple[str, int]], ttl_ms: int, *,
                    max_ahead_ms: int | None = None) -> list[int]:
        return self._locks.claim_fires(keys, ttl_ms, max_ahead_ms=max_ahead_ms)

    def start_fires(self, keys: Sequence[tuple[str, int]], ttl_ms: int, *,
                    due_ms: Sequence[int] | None = None,
                    early_ms: int | None = None) -> list[int]:
        return self._locks.start_fires(keys, ttl_ms, due_ms=due_ms, early_ms=early_ms)

    async def astart_fires(self, keys: Sequence[tuple[str, int]], ttl_ms: int, *,
                           due_ms: Sequence[int] | None = None,
                           early_ms: int | None = None) -> list[int]:
        return await self._locks.astart_fires(keys, ttl_ms, due_ms=due_ms, early_ms=early_ms)

    def take_over_fires(self, keys: Sequence[tuple[str, int]], ttl_ms: int, *,
                        alive: Collection[str] = (), report_absent: bool = False) -> list[int]:
        return self._locks.take_over_fires(keys, ttl_ms, alive=alive,
                                           report_absent=report_absent)

    # -- outcome marks ---------------------------------------------------

    def mark_outcomes(self, marks: Sequence[tuple[str, int, str]], ttl_ms: int) -> None:
        self._marks.mark_outcomes(marks, ttl_ms)

    async def amark_outcomes(self, marks: Sequence[tuple[str, int, str]], ttl_ms: int) -> None:
        await self._marks.amark_outcomes(marks, ttl_ms)

    def read_outcomes(self, run_ids: Sequence[str]) -> list[str | None]:
        return self._marks.read_outcomes(run_ids)

    # -- pulses ----------------------------------------------------------

    def pulse(self, node_id: str, payload: str, ttl_ms: int,
              peers: Sequence[str]) -> PulseReading:
        return self._pulses.pulse(node_id, payload, ttl_ms, peers)

    # -- the rest --------------------------------------------------------

    def ping(self) -> bool:
        return self._set.ping()

    def stats(self) -> dict[str, int]:
        return self._set.counters()

    def close(self) -> None:
        self._set.close()

    async def aclose(self) -> None:
        await self._set.aclose()
