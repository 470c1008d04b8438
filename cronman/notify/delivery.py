"""Sending what the outbox holds, with retries that are recorded, never silent.

Each round takes the messages that are due (``Outbox.claim_due``: status
``sending``, one more attempt, leased for ``LEASE``), sends them a few at a
time through the sender of their channel, and records the outcome:

- accepted: ``sent``;
- failed: ``pending`` again with the error and the next attempt
  ``RETRY_BASE * 2^(attempt-1)`` later (capped at ``RETRY_MAX``), until
  ``CRONMAN_NOTIFY_MAX_ATTEMPTS``; then -- or at once for a permanent
  failure (``SendError.permanent``) -- ``failed``, with its last error,
  listed by ``GET /v1/notifications?status=failed`` and counted in
  ``cronman_notification_attempts{outcome="failed"}``.

An outcome the database cannot take now (an outage, a failover) is kept in
memory and written as soon as it can be (``flush``), whether or not this
notifier is still the active one: a message that was sent is recorded sent,
not sent again. A sender that dies mid-send leaves its messages ``sending``;
the next active notifier sends them again once the previous one has had
time to record what it sent (and, as a backstop, any notifier once their
lease runs out). Receivers deduplicate on the notification id.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from cronman.errors import StoreUnavailable
from cronman.notify.messages import MAX_LISTED
from cronman.notify.metrics import NotifierMetrics
from cronman.notify.model import Outbox
from cronman.notify.senders import Sender, SendError
from cronman.outbox.records import Notification

log = logging.getLogger(__name__)

SEND_BATCH = 20
SEND_CONCURRENCY = 8
SEND_TIMEOUT = 60.0  # above any sender's own timeouts (SMTP 30 s, webhook <= 300 s: capped)
LEASE = timedelta(seconds=120)  # > SEND_TIMEOUT: a live sender always finishes first
RETRY_BASE = 30.0
RETRY_MAX = 3600.0


def retry_delay(attempt: int, base: float = RETRY_BASE, cap: float = RETRY_MAX) -> float:
    """Seconds before the attempt after failed attempt number ``attempt`` (1-based)."""
    return float(min(cap, base * 2 ** max(0, attempt - 1)))


@dataclass(frozen=True)
class _Outcome:
    note: Notification
    error: str | None  # None: sent
    permanent: bool
    at: datetime


class Delivery:
    """Sends due messages and records each attempt (see the module doc)."""

    def __init__(self, outbox: Outbox, senders: Mapping[str, Sender], *, max_attempts: int,
                 metrics: NotifierMetrics, clock: Callable[[], datetime],
                 retry_base: float = RETRY_BASE) -> None:
        self.outbox = outbox
        self.senders = senders
        self.max_attempts = max_attempts
        self.metrics = metrics
        self.clock = clock
        self.retry_base = retry_base
        self._slots = asyncio.Semaphore(SEND_CONCURRENCY)
        self._unrecorded: list[_Outcome] = []
        self._unrecorded_lock = threading.Lock()

    @property
    def unrecorded(self) -> int:
        """Outcomes known here that the database has not taken yet."""
        return len(self._unrecorded)

    def flush(self) -> int:
        """Write the outcomes an outage kept back (blocking); how many are still left."""
        while True:
            with self._unrecorded_lock:
                if not self._unrecorded:
                    return 0
                outcome = self._unrecorded.pop(0)
            try:
                self._write(outcome)
            except StoreUnavailable:
                with self._unrecorded_lock:
                    self._unrecorded.insert(0, outcome)
                    return len(self._unrecorded)

    async def round(self) -> int:
        """Send what is due now; returns how many messages were taken."""
        if self.unrecorded:
            left = await asyncio.to_thread(self.flush)
            if left:
                return 0  # the database still refuses: nothing new is taken meanwhile
        now = self.clock()
        notes = await asyncio.to_thread(self.outbox.claim_due, now, now + LEASE, SEND_BATCH)
        if notes:
            await asyncio.gather(*(self._one(note) for note in notes))
        return len(notes)

    async def _one(self, note: Notification) -> None:
        async with self._slots:
            kind = str(note.channel.get("kind"))
            sender = self.senders.get(kind)
            error: str | None = None
            permanent = False
            try:
                if sender is None:
                    raise SendError(f"no sender for channel kind {kind!r}", permanent=True)
                events = await asyncio.to_thread(self.outbox.events_of, note.id, MAX_LISTED)
                await asyncio.wait_for(sender.send(note, events), SEND_TIMEOUT)
            except asyncio.CancelledError:
                raise  # stopping: the lease hands the message to the next sender
            except SendError as exc:
                error, permanent = str(exc), exc.permanent
            except TimeoutError:
                error = f"no answer within {SEND_TIMEOUT:g} s"
            except Exception as exc:  # a sender bug must not lose the message
                log.exception("notification %s: unexpected error while sending", note.id)
                error = f"{type(exc).__name__}: {exc}"
            await asyncio.to_thread(self._record, note, error, permanent)

    def _record(self, note: Notification, error: str | None, permanent: bool) -> None:
        outcome = _Outcome(note, error, permanent, self.clock())
        try:
            self._write(outcome)
        except StoreUnavailable as exc:
            log.warning("notification %s: outcome kept until the database answers: %s",
                        note.id, exc)
            with self._unrecorded_lock:
                self._unrecorded.append(outcome)

    def _write(self, outcome: _Outcome) -> None:
        note, error, permanent, now = (outcome.note, outcome.error, outcome.permanent,
                                       outcome.at)
        kind = str(note.channel.get("kind"))
        if error is None:
            if self.outbox.mark_sent(note, now):
                self.metrics.attempts.labels(kind, "sent").inc()
            return
        if permanent or note.attempts >= self.max_attempts:
            if self.outbox.mark_unsent(note, error, now, None):
                self.metrics.attempts.labels(kind, "failed").inc()
                log.warning("notification %s (%s, job %s/%s) failed after %d attempt(s): %s",
                            note.id, kind, note.namespace, note.job_name, note.attempts, error)
            return
        delay = retry_delay(note.attempts, self.retry_base)
        if self.outbox.mark_unsent(note, error, now, now + timedelta(seconds=delay)):
            self.metrics.attempts.labels(kind, "retry").inc()
            log.info("notification %s: attempt %d failed (%s); next in %g s", note.id,
                     note.attempts, error, delay)
