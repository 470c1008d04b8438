"""Outcome marks on Redis: how each run's latest attempt ended (``mark.lua``),
each mark on the shard its key lives on."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cronman.coordination.redis_keys import RedisKeys
from cronman.coordination.redis_shards import Shard
from cronman.coordination.redis_shardset import CLAIM_CHUNK, ShardSet


class OutcomeMarks:
    """Writes (blocking or on the event loop) and reads of outcome marks."""

    def __init__(self, shards: ShardSet, keys: RedisKeys) -> None:
        self._shards = shards
        self._keys = keys

    def mark_outcomes(self, marks: Sequence[tuple[str, int, str]], ttl_ms: int) -> None:
        if not marks:
            return
        names = [self._keys.outcome(run_id) for run_id, _, _ in marks]
        values = [f"{int(attempt)}|{mark}" for _, attempt, mark in marks]
        ttl = max(1, int(ttl_ms))
        scripts = self._shards.scripts

        def call(shard: Shard, members: list[int]) -> list[Any]:
            script = scripts.get(shard, "mark")
            chunks = [members[i:i + CLAIM_CHUNK] for i in range(0, len(members), CLAIM_CHUNK)]
            if len(chunks) == 1:
                script(keys=[names[i] for i in members],
                       args=[ttl, *[values[i] for i in members]])
            else:
                pipe = shard.client.pipeline(transaction=False)
                for part in chunks:
                    script(keys=[names[i] for i in part], args=[ttl, *[values[i] for i in part]],
                           client=pipe)
                pipe.execute()
            return [1] * len(members)

        self._shards.on_shards(names, call, "the outcome marks")
        self._shards.count(outcome_batches=1, outcome_marks=len(marks))

    async def amark_outcomes(self, marks: Sequence[tuple[str, int, str]], ttl_ms: int) -> None:
        if not marks:
            return
        names = [self._keys.outcome(run_id) for run_id, _, _ in marks]
        values = [f"{int(attempt)}|{mark}" for _, attempt, mark in marks]
        ttl = max(1, int(ttl_ms))
        scripts = self._shards.scripts

        async def call(shard: Shard, members: list[int]) -> list[Any]:
            await scripts.aget(shard, "mark")(keys=[names[i] for i in members],
                                              args=[ttl, *[values[i] for i in members]])
            return [1] * len(members)

        await self._shards.aon_shards(names, call, "the outcome marks")
        self._shards.count(outcome_batches=1, outcome_marks=len(marks))

    def read_outcomes(self, run_ids: Sequence[str]) -> list[str | None]:
        if not run_ids:
            return []
        names = [self._keys.outcome(run_id) for run_id in run_ids]

        def call(shard: Shard, members: list[int]) -> list[Any]:
            return list(shard.client.mget([names[i] for i in members]))

        values, _ = self._shards.on_shards(names, call, "the outcome reads")
        self._shards.count(outcome_reads=len(names))
        return [None if v is None else v.partition("|")[2] for v in values]
