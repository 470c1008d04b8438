"""The API process: the Flask app with its backends wired in.

``make_app()`` is what gunicorn serves (``wsgi.py``, ``cronman api``): the
store on the configured database and, when Redis is configured, a Redis
coordinator (the cluster view), both opened on first use so the API starts,
and ``/readyz`` reports, while they are down. Tests and ``cronman
standalone`` may hand in a store or coordinator to share; those are not
closed by the API.
"""

from __future__ import annotations

from flask import Flask

from cronman.api.app import create_app
from cronman.config import Settings
from cronman.coordination.base import Coordinator
from cronman.observability import tracing
from cronman.store import open_store
from cronman.store.base import Store


def make_app(settings: Settings | None = None, *, store: Store | None = None,
             coordinator: Coordinator | None = None) -> Flask:
    """The API app on ``settings`` (``Settings.from_env()`` by default)."""
    s = settings or Settings.from_env()
    tracing.configure("cronman-api")  # when OTEL_* ask for it (observability.tracing)

    def open_coordinator() -> Coordinator | None:
        if not s.redis_urls:
            return None
        from cronman.coordination.redis import RedisCoordinator

        return RedisCoordinator(s)

    return create_app(s, store=store, coordinator=coordinator,
                      open_store=lambda: open_store(s.database_url, settings=s),
                      open_coordinator=open_coordinator)
