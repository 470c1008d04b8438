"""Coordinator implementations: Redis (shards or Sentinel) and in-process;
the agent directory (worker agents and container hand-overs) and the
limits' shared counters beside it."""

from __future__ import annotations

from cronman.config import Settings
from cronman.coordination.agents_redis import RedisAgentDirectory
from cronman.coordination.base import Coordinator
from cronman.coordination.limit_counters import LimitCounters


def make_coordinator(settings: Settings) -> Coordinator:
    """The Redis coordinator when ``settings.redis_url`` is set, else an in-process one.

    The in-process coordinator only coordinates nodes of this process
    (``cronman standalone``); a cluster needs Redis.
    """
    if settings.redis_url:
        from cronman.coordination.redis import RedisCoordinator

        return RedisCoordinator(settings)
    from cronman.coordination.memory import InProcessCoordinator

    return InProcessCoordinator(ttl=settings.heartbeat_ttl)


def make_agent_directory(settings: Settings) -> RedisAgentDirectory | None:
    """The Redis agent directory when ``settings.redis_url`` is set, else None
    (without Redis, agents and nodes of different processes cannot meet;
    ``cronman standalone`` builds an in-process one)."""
    if not settings.redis_url:
        return None
    return RedisAgentDirectory(settings)


def make_limit_counters(settings: Settings) -> LimitCounters:
    """The limits' counters on Redis when ``settings.redis_url`` is set, else
    in this process (``cronman standalone``)."""
    if settings.redis_url:
        from cronman.coordination.redis_limits import RedisLimitCounters

        return RedisLimitCounters(settings)
    from cronman.coordination.limits_memory import LocalLimitCounters

    return LocalLimitCounters()
