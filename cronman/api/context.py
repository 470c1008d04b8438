"""What the API's views work with: settings, the store and the coordinator.

One ``ApiContext`` per app, kept in ``app.extensions["cronman"]``. The
process that makes the app (``cronman.processes.api``) says how to open the
store and the coordinator; they are opened on first use (so the API starts,
and ``/readyz`` reports, while the database is down). A store or coordinator
handed in (``cronman standalone`` shares its scheduler's) is not closed by
the API.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from flask import Flask, current_app

from cronman.config import Settings
from cronman.coordination.base import Coordinator
from cronman.errors import CronmanError, StoreUnavailable
from cronman.store.base import Store
from cronman.store.records import Member

log = logging.getLogger(__name__)

EXTENSION_KEY = "cronman"


class ApiContext:
    def __init__(self, settings: Settings, *, store: Store | None = None,
                 coordinator: Coordinator | None = None,
                 open_store: Callable[[], Store] | None = None,
                 open_coordinator: Callable[[], Coordinator | None] | None = None) -> None:
        if store is None and open_store is None:
            raise TypeError("ApiContext needs a store or a way to open one")
        self.settings = settings
        self._store = store
        self._open_store = open_store
        self._owns_store = store is None
        self._coordinator = coordinator
        self._open_coordinator = open_coordinator
        self._owns_coordinator = coordinator is None
        self._coordinator_made = coordinator is not None or open_coordinator is None
        self._lock = threading.Lock()

    @property
    def store(self) -> Store:
        if self._store is None:
            with self._lock:
                if self._store is None:
                    assert self._open_store is not None
                    try:
                        self._store = self._open_store()
                    except CronmanError:
                        raise
                    except Exception as exc:
                        log.exception("cannot open the store")
                        raise StoreUnavailable(f"cannot open the database: {exc}") from exc
        return self._store

    def database_member(self) -> Member | None:
        """The database member written to (None while no store is open: a
        scrape or a probe does not open one)."""
        store = self._store
        return None if store is None else store.database_member()

    @property
    def coordinator(self) -> Coordinator | None:
        """The coordinator handed in, else the one opened on first use (None
        without Redis)."""
        if not self._coordinator_made:
            with self._lock:
                if not self._coordinator_made:
                    assert self._open_coordinator is not None
                    self._coordinator = self._open_coordinator()
                    self._coordinator_made = True
        return self._coordinator

    def close(self) -> None:
        if self._owns_store and self._store is not None:
            self._store.close()
            self._store = None
        if self._owns_coordinator and self._coordinator is not None:
            self._coordinator.close()
            self._coordinator = None
            self._coordinator_made = self._open_coordinator is None


def api_context(app: Flask | None = None) -> ApiContext:
    context: ApiContext = (app or current_app).extensions[EXTENSION_KEY]
    return context
