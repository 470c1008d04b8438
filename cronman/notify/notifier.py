"""The notifier: one per scheduler node, one active per cluster.

``await Notifier(...).run()`` until ``request_stop()``: try to become the
active notifier (``leadership``); while active, run detection passes
(``detector.Detector``) every ``CRONMAN_NOTIFY_POLL_INTERVAL`` seconds and,
beside them, send what the outbox holds (``delivery.Delivery``); drop what
is past the history retention once an hour. Database calls run on worker
threads; the node's own event loop is never involved (the scheduler process
runs the notifier on a thread of its own: ``cronman.processes.notifier``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry

from cronman.config import Settings
from cronman.errors import StoreUnavailable
from cronman.notify.delivery import Delivery
from cronman.notify.detector import Detector
from cronman.notify.email import EmailSender
from cronman.notify.leadership import Leadership, leadership_for
from cronman.notify.metrics import NotifierMetrics
from cronman.notify.senders import Sender
from cronman.notify.webhook import WebhookSender
from cronman.timeutil import utcnow

log = logging.getLogger(__name__)

LOCK_RETRY = 3.0  # seconds between a standby's attempts at the lock
# How long a new active notifier leaves its predecessor's messages ``sending``
# before it sends them again: after a database failover that predecessor is
# usually alive and records what it sent (``Delivery.flush``) within a lock retry.
RELEASE_GRACE = 3 * LOCK_RETRY
ERROR_PAUSE = 2.0
PURGE_EVERY = 3600.0
BACKLOG_EVERY = 15.0


def default_senders(settings: Settings, store: Any = None) -> dict[str, Sender]:
    key_state = store.signing_keys.state if store is not None else None
    return {"email": EmailSender(settings),
            "webhook": WebhookSender(settings, key_state=key_state)}


class Notifier:
    """Finds events in the run history and sends notifications (see the module doc).

    ``store`` is a ``cronman.store.SqlStore`` (its ``jobs``, ``notify_outbox``
    and ``notification_rules``). The keyword arguments replace what tests
    need to replace: the senders, the lock, the clock, the intervals.
    """

    def __init__(self, settings: Settings, store: Any, *,
                 senders: Mapping[str, Sender] | None = None,
                 leadership: Leadership | None = None,
                 registry: CollectorRegistry | None = REGISTRY,
                 metrics: NotifierMetrics | None = None,
                 poll_interval: float | None = None, lock_retry: float = LOCK_RETRY,
                 release_grace: float = RELEASE_GRACE,
                 late_settle: float | None = None, retry_base: float | None = None,
                 clock: Callable[[], datetime] = utcnow) -> None:
        self.settings = settings
        self.node_id = settings.node_id
        self.metrics = metrics or NotifierMetrics(registry)
        self.clock = clock
        self.poll_interval = poll_interval or settings.notify_poll_interval
        self.lock_retry = lock_retry
        self.release_grace = release_grace
        self.retention = timedelta(days=settings.history_retention_days)
        self.leadership = leadership or leadership_for(settings.database_url, self.node_id)
        self.senders = dict(senders) if senders is not None else default_senders(settings, store)
        extra: dict[str, Any] = {}
        if late_settle is not None:
            extra["late_settle"] = timedelta(seconds=late_settle)
        self.detector = Detector(store.notify_outbox, store.jobs, store.notification_rules,
                                 node_id=self.node_id, metrics=self.metrics, **extra)
        self.delivery = Delivery(store.notify_outbox, self.senders,
                                 max_attempts=settings.notify_max_attempts,
                                 metrics=self.metrics, clock=clock,
                                 **({} if retry_base is None else {"retry_base": retry_base}))
        self.outbox = store.notify_outbox
        self.active = threading.Event()  # set while this one is the active notifier
        self._stop: asyncio.Event | None = None
        self._wake_sender: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_requested = False

    # -- running ----------------------------------------------------------------

    def request_stop(self) -> None:
        """Stop (thread-safe; ``run`` returns soon after)."""
        self._stop_requested = True
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop.set)

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._wake_sender = asyncio.Event()
        if self._stop_requested:
            return
        announced = False
        try:
            while not self._stop.is_set():
                if self.delivery.unrecorded:
                    await asyncio.to_thread(self.delivery.flush)
                try:
                    leading = await asyncio.to_thread(self.leadership.acquire)
                except Exception:
                    log.exception("notifier: cannot try the lock; retrying")
                    await self._sleep(ERROR_PAUSE)
                    continue
                if not leading:
                    if not announced:
                        log.info("notifier on %s standing by (another node's is active)",
                                 self.node_id)
                        announced = True
                    await self._sleep(self.lock_retry)
                    continue
                announced = False
                log.info("notifier on %s is the active notifier", self.node_id)
                self.active.set()
                self.metrics.active.set(1)
                try:
                    await self._lead()
                except Exception:  # never let notifications stop for good on one error
                    log.exception("notifier: failed while active; starting over")
                    await asyncio.to_thread(self.leadership.release)
                    await self._sleep(ERROR_PAUSE)
                finally:
                    self.active.clear()
                    self.metrics.active.set(0)
        finally:
            if self.delivery.unrecorded and await asyncio.to_thread(self.delivery.flush):
                log.warning("notifier: stopping with %d outcome(s) the database did not take; "
                            "those messages will be sent again", self.delivery.unrecorded)
            await asyncio.to_thread(self.leadership.release)
            for sender in self.senders.values():
                with contextlib.suppress(Exception):
                    await sender.close()

    async def _sleep(self, seconds: float, wake: asyncio.Event | None = None) -> None:
        assert self._stop is not None
        waits = [asyncio.ensure_future(self._stop.wait())]
        if wake is not None:
            waits.append(asyncio.ensure_future(wake.wait()))
        try:
            await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        if wake is not None:
            wake.clear()

    async def _lead(self) -> None:
        """Detect and send while this notifier holds the lock."""
        assert self._stop is not None
        try:
            await asyncio.to_thread(self.detector.activate, self.clock())
            await asyncio.to_thread(self.delivery.flush)
            # Whoever held the lock before lost its session: what it was sending
            # goes out again once it has had RELEASE_GRACE to record what it sent.
            inherited = await asyncio.to_thread(self.outbox.claims)
        except StoreUnavailable as exc:
            log.warning("notifier: cannot load its state: %s", exc)
            await self._sleep(ERROR_PAUSE)
            return
        release_at = time.monotonic() + self.release_grace
        sending = asyncio.create_task(self._send_loop())
        next_purge = time.monotonic() + 60.0
        try:
            while not self._stop.is_set():
                if not await asyncio.to_thread(self.leadership.holds):
                    return
                more = False
                try:
                    if inherited and time.monotonic() >= release_at:
                        released = await asyncio.to_thread(
                            self.outbox.release_claims, self.clock(), inherited)
                        inherited = []
                        if released:
                            log.info("notifier: %d message(s) left being sent by the previous "
                                     "notifier are sent again", released)
                            if self._wake_sender is not None:
                                self._wake_sender.set()
                    stats = await asyncio.to_thread(self.detector.step, self.clock())
                    more = stats.more
                    if stats.messages and self._wake_sender is not None:
                        self._wake_sender.set()
                    if time.monotonic() >= next_purge:
                        next_purge = time.monotonic() + PURGE_EVERY
                        await asyncio.to_thread(self.outbox.purge, self.clock() - self.retention)
                except StoreUnavailable as exc:
                    log.warning("notifier: database unavailable, retrying: %s", exc)
                    await self._sleep(ERROR_PAUSE)
                    continue
                except Exception:
                    log.exception("notifier: detection pass failed; retrying")
                    await self._sleep(ERROR_PAUSE)
                    continue
                if not more:
                    await self._sleep(self.poll_interval)
        finally:
            sending.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sending

    async def _send_loop(self) -> None:
        assert self._stop is not None
        next_backlog = 0.0
        while not self._stop.is_set():
            taken = 0
            try:
                taken = await self.delivery.round()
                if time.monotonic() >= next_backlog:
                    next_backlog = time.monotonic() + BACKLOG_EVERY
                    waiting, overdue = await asyncio.to_thread(self.outbox.backlog, self.clock())
                    self.metrics.backlog.set(waiting)
                    self.metrics.overdue.set(overdue)
            except StoreUnavailable as exc:
                log.warning("notifier: database unavailable while sending: %s", exc)
                await self._sleep(ERROR_PAUSE)
                continue
            except Exception:
                log.exception("notifier: a sending round failed; retrying")
                await self._sleep(ERROR_PAUSE)
                continue
            if not taken:
                await self._sleep(self.poll_interval, self._wake_sender)
