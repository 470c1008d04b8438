"""The notifier beside a scheduler node: on a thread and event loop of its own.

Every scheduler node (and ``cronman standalone``) runs one; the cluster's
active one is chosen by a database lock (``cronman.notify.leadership``).
Its own thread keeps notification work -- database reads, SMTP, webhooks --
off the node's event loop, which dispatches fires; the node needs no change
to host it. ``CRONMAN_NOTIFY=false`` leaves it out of a node.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry

from cronman.config import Settings

log = logging.getLogger(__name__)

# A stop waits this long for the notifier's current step (a database call, an
# SMTP exchange); the thread is a daemon and does not hold the process up.
STOP_TIMEOUT = 5.0


class NotifierThread:
    """Runs ``Notifier.run()`` on a daemon thread until ``stop()``."""

    def __init__(self, notifier: Any) -> None:
        self.notifier = notifier
        self._thread = threading.Thread(target=self._main, name="cronman-notifier", daemon=True)

    def _main(self) -> None:
        try:
            asyncio.run(self.notifier.run())
        except Exception:
            log.exception("the notifier stopped on an error")

    def start(self) -> NotifierThread:
        self._thread.start()
        return self

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        self.notifier.request_stop()
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning("the notifier did not stop within %g s", timeout)


def start_notifier(settings: Settings, store: Any,
                   registry: CollectorRegistry | None = REGISTRY) -> NotifierThread | None:
    """Start this node's notifier (None when ``CRONMAN_NOTIFY`` is off)."""
    if not settings.notify:
        log.info("notifications are off on this node (CRONMAN_NOTIFY=false)")
        return None
    from cronman.notify.notifier import Notifier

    return NotifierThread(Notifier(settings, store, registry=registry)).start()
