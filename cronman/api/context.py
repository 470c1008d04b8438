"""What the API's views work with: settings, the store and the coordinator.

One ``ApiContext`` per app, kept in ``app.extensions["cronman"]``. The store
is opened on first use (so the API starts, and ``/readyz`` reports, while the
database is down); a store handed in by ``cronman standalone`` is shared with
the scheduler and not closed by the API.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from flask import Flask, current_app

from cronman.config import Settings
from cronman.errors import CronmanError, StoreUnavailable
from cronman.scheduler.coordinator import Coordinator

log = logging.getLogger(__name__)

EXTENSION_KEY = "cronman"


class ApiContext:
    def __init__(self, settings: Settings, *, store: Any = None,
                 coordinator: Coordinator | None = None) -> None:
        self.settings = settings
        self._store = store
        self._owns_store = store is None
        self._coordinator = coordinator
        self._owns_coordinator = coordinator is None
        self._coordinator_made = coordinator is not None
        self._lock = threading.Lock()

    @property
    def store(self) -> Any:
        if self._store is None:
            with self._lock:
                if self._store is None:
                    from cronman.store import open_store

                    try:
                        self._store = open_store(self.settings.database_url,
                                                 settings=self.settings)
                    except CronmanError:
                        raise
                    except Exception as exc:
                        log.exception("cannot open the store")
                        raise StoreUnavailable(f"cannot open the database: {exc}") from exc
        return self._store

    @property
    def coordinator(self) -> Coordinator | None:
        """The injected coordinator; else a Redis one when Redis is configured; else None."""
        if not self._coordinator_made:
            with self._lock:
                if not self._coordinator_made:
                    if self.settings.redis_urls:
                        from cronman.scheduler.coordination.redis import RedisCoordinator

                        self._coordinator = RedisCoordinator(self.settings)
                    self._coordinator_made = True
        return self._coordinator

    def close(self) -> None:
        if self._owns_store and self._store is not None:
            self._store.close()
            self._store = None
        if self._owns_coordinator and self._coordinator is not None:
            self._coordinator.close()
            self._coordinator = None
            self._coordinator_made = False


def api_context(app: Flask | None = None) -> ApiContext:
    return (app or current_app).extensions[EXTENSION_KEY]
