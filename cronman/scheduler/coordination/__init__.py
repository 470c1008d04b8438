"""Coordinator implementations: Redis (shards or Sentinel) and in-process."""

from __future__ import annotations

from cronman.config import Settings
from cronman.scheduler.coordinator import Coordinator


def make_coordinator(settings: Settings) -> Coordinator:
    """The Redis coordinator when ``settings.redis_url`` is set, else an in-process one.

    The in-process coordinator only coordinates nodes of this process
    (``cronman standalone``); a cluster needs Redis.
    """
    if settings.redis_url:
        from cronman.scheduler.coordination.redis import RedisCoordinator

        return RedisCoordinator(settings)
    from cronman.scheduler.coordination.memory import InProcessCoordinator

    return InProcessCoordinator(ttl=settings.heartbeat_ttl)
