"""Membership on Redis: heartbeats, leaving, the live members and the log of
membership changes, written to and read from every reachable shard."""

from __future__ import annotations

import json
from datetime import datetime

from cronman.coordination.base import MEMBERSHIP_LOG_MAX, MembershipChange, NodeInfo
from cronman.coordination.redis_keys import RedisKeys
from cronman.coordination.redis_records import beat_ms, dedupe_changes, membership_change, node_info
from cronman.coordination.redis_shardset import ShardSet
from cronman.timeutil import to_ms


class RedisMembership:
    """The members' heartbeats (``heartbeat.lua``, ``leave.lua``) and their
    reads (``members.lua``, ``changes.lua``), the union over the shards."""

    def __init__(self, shards: ShardSet, keys: RedisKeys, *, ttl_ms: int) -> None:
        self._shards = shards
        self._keys = keys
        self._ttl_ms = ttl_ms

    def heartbeat(self, node: NodeInfo) -> None:
        args: list[str | int] = [
            node.id,
            self._ttl_ms,
            node.address,
            "" if node.started_at is None else to_ms(node.started_at),
            json.dumps(node.stats, separators=(",", ":"), default=str),
            MEMBERSHIP_LOG_MAX,
        ]
        k = self._keys
        keys = [k.members, k.member(node.id), k.membership]
        written = sum(1 for _ in self._shards.on_every("heartbeat", keys, args))
        if not written:
            self._shards.count(heartbeat_failures=1)
            raise self._shards.unavailable("the heartbeat")
        self._shards.count(heartbeats=1)

    def leave(self, node_id: str) -> None:
        k = self._keys
        replies = self._shards.on_every("leave", [k.members, k.member(node_id), k.membership],
                                        [node_id, MEMBERSHIP_LOG_MAX])
        if not sum(1 for _ in replies):
            raise self._shards.unavailable("leave")

    def live_members(self) -> list[NodeInfo]:
        merged: dict[str, NodeInfo] = {}
        answered = 0
        for reply in self._shards.on_every("members", [self._keys.members],
                                           [self._keys.member_prefix]):
            answered += 1
            for i in range(1, len(reply) - 1, 2):
                info = node_info(reply[i], reply[i + 1])
                seen = merged.get(info.id)
                if seen is None or beat_ms(info) > beat_ms(seen):
                    merged[info.id] = info
        if not answered:
            raise self._shards.unavailable("the membership read")
        return [merged[k] for k in sorted(merged)]

    def membership_changes(self, since: datetime) -> list[MembershipChange]:
        """Every shard's log merged: a change the shards recorded alike (one
        heartbeat or leave goes to each) is shown once."""
        found: list[MembershipChange] = []
        answered = 0
        for reply in self._shards.on_every("changes", [self._keys.members, self._keys.membership],
                                           [MEMBERSHIP_LOG_MAX]):
            answered += 1
            found.extend(c for c in map(membership_change, reply[1])
                         if c is not None and c.at >= since)
        if not answered:
            raise self._shards.unavailable("the membership changes")
        return dedupe_changes(found, window_ms=self._ttl_ms)
