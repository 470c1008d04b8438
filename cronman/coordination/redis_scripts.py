"""The coordinator's Lua scripts (the ``*.lua`` files beside this module),
registered on every shard's clients."""

from __future__ import annotations

from importlib.resources import files

import redis.asyncio as aredis
from redis.commands.core import AsyncScript, Script

from cronman.coordination.redis_shards import Shard
from cronman.coordination.resp import RespConnection, RespScript

SCRIPTS = ("heartbeat", "members", "leave", "changes", "claim", "start", "takeover", "mark",
           "pulse")


def script_source(name: str) -> str:
    """The text of the script file ``name`` in this package."""
    return files(__package__).joinpath(name).read_text(encoding="utf-8")


class ShardScripts:
    """Each script registered on each shard: on its blocking client up front,
    on its asyncio client on first use (and again when that client is new)."""

    def __init__(self, shards: list[Shard]) -> None:
        self._sources = {name: script_source(f"{name}.lua") for name in SCRIPTS}
        self._sync = [{name: s.client.register_script(src) for name, src in self._sources.items()}
                      for s in shards]
        self._async: dict[tuple[int, str],
                          tuple[RespConnection | aredis.Redis, AsyncScript | RespScript]] = {}

    def get(self, shard: Shard, name: str) -> Script:
        """Script ``name`` on ``shard``'s blocking client."""
        return self._sync[shard.index][name]

    def aget(self, shard: Shard, name: str) -> AsyncScript | RespScript:
        """Script ``name`` on ``shard``'s asyncio connection for the running
        loop: its lean one (``resp``) where the shard has one, else redis-py's."""
        resp = shard.aresp()
        client: RespConnection | aredis.Redis = resp if resp is not None else shard.aclient()
        cached = self._async.get((shard.index, name))
        if cached is None or cached[0] is not client:
            source = self._sources[name]
            script = (RespScript(client, source) if isinstance(client, RespConnection)
                      else client.register_script(source))
            cached = (client, script)
            self._async[(shard.index, name)] = cached
        return cached[1]

    def forget_async(self) -> None:
        """Drop the asyncio registrations (their clients are being closed)."""
        self._async.clear()
