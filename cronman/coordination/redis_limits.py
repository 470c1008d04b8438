"""The limits' shared counters on Redis (``limits.lua``: the key layout is
written at its top), for every node together.

Every limit's keys live on the *first* shard of ``CRONMAN_REDIS_URL`` (with
Sentinel, on the primary): a batch of asks takes starts and slots of several
limits at once, which one script on one server makes atomic. Each call is
one round trip on the event loop, judged on the server's clock. When that
shard cannot answer, the caller counts on its fair share locally
(``dispatch.limits``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import redis
from redis.commands.core import AsyncScript

from cronman.config import Settings
from cronman.coordination.limit_counters import (
    GRANTED,
    Answer,
    Ask,
    CountersRestarted,
    LimitSpec,
)
from cronman.coordination.redis_scripts import script_source
from cronman.coordination.redis_shards import Shard, first_shard
from cronman.errors import CoordinatorUnavailable

_ERRORS: tuple[type[BaseException], ...] = (redis.RedisError, OSError)
# How long a node's word that its fires wait on a limit holds (it says it
# again with each ask, every 20 ms or so while they wait).
WAITING_TTL_MS = 500


class RedisLimitCounters:
    """``LimitCounters`` on the first Redis shard of ``settings.redis_url``."""

    shared = True

    def __init__(self, settings: Settings, *, shard: Shard | None = None) -> None:
        self.shard = shard or first_shard(settings.redis_url, "RedisLimitCounters")
        self.prefix = settings.redis_key_prefix
        self._source = script_source("limits.lua")
        self._script = self.shard.client.register_script(self._source)
        self._async: tuple[Any, AsyncScript] | None = None
        # The counters' epoch this caller told what it holds ("": none yet).
        self.epoch = ""

    @property
    def retry_ms(self) -> int:
        return int(self.shard.max_backoff * 1000)

    def _ascript(self) -> AsyncScript:
        client = self.shard.aclient()
        if self._async is None or self._async[0] is not client:
            self._async = (client, client.register_script(self._source))
        return self._async[1]

    async def _acall(self, args: list[Any], what: str) -> Any:
        if not self.shard.available():
            raise CoordinatorUnavailable(f"Redis {self.shard.name} is backing off ({what})")
        try:
            reply = await self._ascript()(keys=[], args=args)
        except _ERRORS as exc:
            self.shard.failed(exc)
            raise CoordinatorUnavailable(
                f"Redis {self.shard.name} did not answer {what}: {exc}") from None
        self.shard.succeeded()
        return reply

    async def take(self, node_id: str, specs: Sequence[LimitSpec], asks: Sequence[Ask], *,
                   lease_ms: int, margin_ms: int, quarantine_ms: int = 0,
                   waiting: Mapping[str, int] | None = None) -> list[Answer]:
        if not asks:
            return []
        waiting = waiting or {}
        args: list[Any] = ["take", self.prefix, self.epoch, node_id, int(lease_ms),
                           int(margin_ms), int(quarantine_ms), WAITING_TTL_MS, len(specs)]
        for s in specs:
            top = waiting.get(s.name)
            args += [s.name, s.count, s.window_ms, s.burst, repr(float(s.per_ms)),
                     s.concurrency, "-" if top is None else int(top)]
        for ask in asks:
            args += [ask.token, int(ask.priority), len(ask.limits),
                     *[k + 1 for k in ask.limits]]
        reply = await self._acall(args, "the limits")
        if len(reply) == 1:
            raise CountersRestarted(f"the limits' counters began anew at {reply[0]}")
        out = []
        for entry in reply[1:]:
            if entry == 0:
                out.append(GRANTED)
            else:
                k, used, wait = entry
                out.append(Answer(False, int(k) - 1, int(used), int(wait)))
        return out

    async def release(self, node_id: str, held: Sequence[tuple[str, str]]) -> None:
        if held:
            await self._acall(["release", self.prefix, self.epoch, node_id,
                               *[x for pair in held for x in pair]], "the limits' release")

    async def renew(self, node_id: str, held: Sequence[tuple[str, str]], lease_ms: int
                    ) -> None:
        if held:
            epoch = await self._acall(["renew", self.prefix, self.epoch, node_id,
                                       int(lease_ms), *[x for pair in held for x in pair]],
                                      "the limits' renewal")
            if epoch != self.epoch:
                raise CountersRestarted(f"the limits' counters began anew at {epoch}")

    async def restore(self, node_id: str, held: Sequence[tuple[str, str, str, int]],
                      lease_ms: int) -> None:
        self.epoch = str(await self._acall(
            ["restore", self.prefix, self.epoch, node_id, int(lease_ms),
             *[x for entry in held for x in entry]], "the limits' restore"))

    def usage(self, names: Sequence[str], windows_ms: Sequence[int]) -> list[tuple[int, int]]:
        if not names:
            return []
        args: list[Any] = ["usage", self.prefix, ""]
        for name, window in zip(names, windows_ms, strict=True):
            args += [name, int(window)]
        try:
            reply = self._script(keys=[], args=args)
        except _ERRORS as exc:
            self.shard.failed(exc)
            raise CoordinatorUnavailable(
                f"Redis {self.shard.name} did not answer the limits' usage: {exc}") from None
        self.shard.succeeded()
        return [(int(reply[i]), int(reply[i + 1])) for i in range(0, len(reply), 2)]

    async def aclose(self) -> None:
        self._async = None
        await self.shard.aclose()

    def close(self) -> None:
        self.shard.close()
