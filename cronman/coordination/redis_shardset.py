"""The coordinator's Redis shards and what every operation on them shares:
the scripts, calls on every shard or on the shard each key lives on (failing
over to the next in the key's order), and the counters ``stats()`` reports."""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import redis

from cronman.coordination.redis_placement import ShardOrder
from cronman.coordination.redis_scripts import ShardScripts
from cronman.coordination.redis_shards import Shard
from cronman.errors import CoordinatorUnavailable

#: Keys per script call; a bigger batch is split (in one pipeline) so that no
#: single script keeps the server busy for long.
CLAIM_CHUNK = 1000

# Errors that mean "this shard cannot serve us now": connection refused or
# reset, timeouts, no primary known to Sentinel (MasterNotFoundError is a
# ConnectionError), a demoted primary (ReadOnlyError), a server still loading.
# Any other server error (auth, a foreign key of the wrong type under our
# prefix) is treated alike: logged, the shard sits out its back-off, and the
# cluster carries on with the others or on the database fence.
SHARD_ERRORS: tuple[type[BaseException], ...] = (redis.RedisError, OSError)

COUNTERS = ("heartbeats", "heartbeat_failures", "claim_batches", "claim_keys",
            "claim_failovers", "start_batches", "takeovers", "outcome_batches", "outcome_marks",
            "outcome_reads", "pulses", "shard_errors", "unavailable")


class ShardSet:
    """The shards in their fixed order, with their scripts and counters (thread-safe)."""

    def __init__(self, shards: list[Shard]) -> None:
        self.shards = shards
        # Rendezvous weights of the shards by position, for key placement.
        self._order = ShardOrder(shards)
        self.scripts = ShardScripts(shards)
        self._counter_lock = threading.Lock()
        self._counters = dict.fromkeys(COUNTERS, 0)

    def count(self, **deltas: int) -> None:
        with self._counter_lock:
            for name, delta in deltas.items():
                self._counters[name] += delta

    def counters(self) -> dict[str, int]:
        """The counters so far, with how many shards there are and are up."""
        with self._counter_lock:
            counters = dict(self._counters)
        counters["shards"] = len(self.shards)
        counters["shards_up"] = sum(not s.down for s in self.shards)
        return counters

    def failed(self, shard: Shard, error: BaseException) -> None:
        shard.failed(error)
        self.count(shard_errors=1)

    def unavailable(self, what: str) -> CoordinatorUnavailable:
        self.count(unavailable=1)
        names = ", ".join(s.name for s in self.shards)
        return CoordinatorUnavailable(f"no Redis shard answered {what} ({names})")

    def on_every(self, script: str, keys: list[str], args: list[Any]) -> Iterator[Any]:
        """``script``'s reply from every reachable shard, in shard order (a
        shard that fails is marked so and skipped)."""
        for shard in self.shards:
            if not shard.available():
                continue
            try:
                reply = self.scripts.get(shard, script)(keys=keys, args=args)
            except SHARD_ERRORS as e:
                self.failed(shard, e)
                continue
            shard.succeeded()
            yield reply

    def on_shards(self, names: list[str], call: Callable[[Shard, list[int]], list[Any]],
                  what: str) -> tuple[list[Any], int]:
        """``call(shard, indexes)`` for the names placed on each shard (the next
        reachable one in the name's order when that shard is down), one call
        per shard. Returns (the replies by name, names placed off their
        first shard)."""
        placing = self._order.placing(names, lambda: self.unavailable(what))
        while placing.pending:
            for index, members in placing.groups():
                shard = self.shards[index]
                try:
                    replies = call(shard, members)
                except SHARD_ERRORS as e:
                    self.failed(shard, e)
                    placing.failed(index, members)
                    continue
                shard.succeeded()
                placing.answered(members, replies)
        return placing.answers, placing.failovers

    async def aon_shards(self, names: list[str],
                         call: Callable[[Shard, list[int]], Awaitable[list[Any]]],
                         what: str) -> tuple[list[Any], int]:
        """``on_shards`` on the event loop, through the shards' asyncio clients."""
        placing = self._order.placing(names, lambda: self.unavailable(what))
        while placing.pending:
            for index, members in placing.groups():
                shard = self.shards[index]
                try:
                    replies = await call(shard, members)
                except SHARD_ERRORS as e:
                    self.failed(shard, e)
                    placing.failed(index, members)
                    continue
                shard.succeeded()
                placing.answered(members, replies)
        return placing.answers, placing.failovers

    def ping(self) -> bool:
        """Whether any shard answers a PING."""
        up = False
        for shard in self.shards:
            try:
                shard.client.ping()
            except SHARD_ERRORS as e:
                self.failed(shard, e)
                continue
            shard.succeeded()
            up = True
        return up

    def close(self) -> None:
        for shard in self.shards:
            shard.close()

    async def aclose(self) -> None:
        self.scripts.forget_async()
        for shard in self.shards:
            await shard.aclose()
