"""Fire locks on Redis: claims (``claim.lua``), start marks (``start.lua``)
and takeovers (``takeover.lua``), each lock on the shard its key lives on."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from cronman.coordination.base import TAKEN
from cronman.coordination.redis_keys import RedisKeys
from cronman.coordination.redis_shards import Shard
from cronman.coordination.redis_shardset import CLAIM_CHUNK, ShardSet


class FireLocks:
    """The lock scripts over batches of (job id, fire ms) keys, held as ``holder``."""

    def __init__(self, shards: ShardSet, keys: RedisKeys, *, holder: str) -> None:
        self._shards = shards
        self._keys = keys
        self._holder = holder

    def claim_fires(self, keys: Sequence[tuple[str, int]], ttl_ms: int, *,
                    max_ahead_ms: int | None = None) -> list[int]:
        if ttl_ms <= 0:
            raise ValueError("ttl_ms must be > 0")
        if not keys:
            return []
        ahead = "" if max_ahead_ms is None else int(max_ahead_ms)
        won, failovers = self._lock_replies("claim", keys, [self._holder, int(ttl_ms), ahead],
                                            "the fire claims")
        self._shards.count(claim_batches=1, claim_keys=len(keys), claim_failovers=failovers)
        return [int(w) for w in won]

    def start_fires(self, keys: Sequence[tuple[str, int]], ttl_ms: int, *,
                    due_ms: Sequence[int] | None = None,
                    early_ms: int | None = None) -> list[int]:
        if not keys:
            return []
        args: list[Any] = [self._holder, max(1, int(ttl_ms))]
        per_key = None
        if due_ms is not None and early_ms is not None:
            args.append(int(early_ms))
            per_key = [int(d) for d in due_ms]
        started, _ = self._lock_replies("start", keys, args, "the fire starts", per_key)
        self._shards.count(start_batches=1)
        return [int(s) for s in started]

    async def astart_fires(self, keys: Sequence[tuple[str, int]], ttl_ms: int, *,
                           due_ms: Sequence[int] | None = None,
                           early_ms: int | None = None) -> list[int]:
        if not keys:
            return []
        args: list[Any] = [self._holder, max(1, int(ttl_ms))]
        per_key: list[int] | None = None
        if due_ms is not None and early_ms is not None:
            args.append(int(early_ms))
            per_key = [int(d) for d in due_ms]
        lock = self._keys.lock
        names = [lock(job_id, fire_ms) for job_id, fire_ms in keys]
        scripts = self._shards.scripts

        async def call(shard: Shard, members: list[int]) -> list[Any]:
            extra = [] if per_key is None else [per_key[i] for i in members]
            return list(await scripts.aget(shard, "start")(
                keys=[names[i] for i in members], args=args + extra))

        replies, _ = await self._shards.aon_shards(names, call, "the fire starts")
        self._shards.count(start_batches=1)
        return [int(r) for r in replies]

    def take_over_fires(self, keys: Sequence[tuple[str, int]], ttl_ms: int, *,
                        alive: Collection[str] = (), report_absent: bool = False) -> list[int]:
        if not keys:
            return []
        args = [self._holder, max(1, int(ttl_ms)), "1" if report_absent else "0", *alive]
        answers, _ = self._lock_replies("takeover", keys, args, "the fire takeovers")
        taken = [int(a) for a in answers]
        self._shards.count(takeovers=taken.count(TAKEN))
        return taken

    def _lock_replies(self, script_name: str, keys: Sequence[tuple[str, int]],
                      args: list[Any], what: str,
                      per_key: Sequence[Any] | None = None) -> tuple[list[Any], int]:
        """A lock script's replies per key (``per_key``: one more argument per
        key, appended after ``args`` in key order), and how many keys were
        placed off their first shard."""
        lock = self._keys.lock
        names = [lock(job_id, fire_ms) for job_id, fire_ms in keys]

        def call(shard: Shard, members: list[int]) -> list[Any]:
            extra = None if per_key is None else [per_key[i] for i in members]
            return self._script_on(shard, script_name, [names[i] for i in members], args,
                                   extra)

        return self._shards.on_shards(names, call, what)

    def _script_on(self, shard: Shard, script_name: str, names: list[str], args: list[Any],
                   per_key: list[Any] | None = None) -> list[int]:
        script = self._shards.scripts.get(shard, script_name)
        if len(names) <= CLAIM_CHUNK:
            return list(script(keys=names, args=args + (per_key or [])))
        pipe = shard.client.pipeline(transaction=False)
        for start in range(0, len(names), CLAIM_CHUNK):
            end = start + CLAIM_CHUNK
            script(keys=names[start:end], args=args + (per_key or [])[start:end], client=pipe)
        replies: list[int] = []
        for part in pipe.execute():
            replies.extend(part)
        return replies
