"""Where a batch of keys lives among the Redis shards.

Each key (a fire lock or an outcome mark) goes to the highest-weighted
reachable shard for it: rendezvous hashing over the shard positions, so every
node must list the same shards in the same order, and a dead shard's keys
spread evenly over the others. Shared by the coordinator's blocking and
asyncio paths.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from cronman.coordination.ownership import job_hash, node_hash, score
from cronman.coordination.redis_shards import Shard
from cronman.errors import CoordinatorUnavailable


class ShardOrder:
    """The rendezvous order of a fixed list of shards."""

    def __init__(self, shards: Sequence[Shard]) -> None:
        self.shards = list(shards)
        self._hashes = [node_hash(f"shard-{s.index}") for s in self.shards]

    def place(self, key_hash: int, candidates: Iterable[int]) -> int:
        """The candidate shard with the highest rendezvous weight for a key."""
        best_index, best_weight = -1, -1
        for index in candidates:
            weight = score(self._hashes[index], key_hash)
            if weight > best_weight:
                best_index, best_weight = index, weight
        return best_index

    def placing(self, names: list[str],
                unavailable: Callable[[], CoordinatorUnavailable]) -> Placing:
        """A placement of these key names; ``unavailable()`` is raised when no
        shard is left to try."""
        return Placing(self, names, unavailable)


class Placing:
    """One batch being placed: the pending keys by the shard to try next;
    keys of a shard that fails move on to the next one in their order."""

    def __init__(self, order: ShardOrder, names: list[str],
                 unavailable: Callable[[], CoordinatorUnavailable]) -> None:
        self._order = order
        self._unavailable = unavailable
        self.answers: list[Any] = [None] * len(names)
        self.pending = list(range(len(names)))
        self._hashes = [job_hash(n) for n in names] if len(order.shards) > 1 else None
        self._tried: set[int] = set()
        self.failovers = 0

    def groups(self) -> list[tuple[int, list[int]]]:
        """The pending keys by the shard to try next (raises when none is left)."""
        shards = self._order.shards
        usable = [s.index for s in shards if s.index not in self._tried and s.available()]
        if not usable:
            raise self._unavailable()
        groups: dict[int, list[int]] = {}
        if self._hashes is None:
            groups[usable[0]] = self.pending
        else:
            everyone = len(usable) == len(shards)
            place = self._order.place
            for i in self.pending:
                target = place(self._hashes[i], usable)
                if not everyone and target != place(self._hashes[i], range(len(shards))):
                    self.failovers += 1
                groups.setdefault(target, []).append(i)
        self.pending = []
        return list(groups.items())

    def failed(self, index: int, members: list[int]) -> None:
        self._tried.add(index)
        self.pending.extend(members)

    def answered(self, members: list[int], replies: Sequence[Any]) -> None:
        for i, reply in zip(members, replies, strict=True):
            self.answers[i] = reply
