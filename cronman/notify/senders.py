"""Delivering one notification: the ``Sender`` contract.

A sender either returns (the message was accepted) or raises ``SendError``;
``permanent`` says that trying again cannot help (a recipient refused, a
private address refused by the guard), so the notification fails at once
instead of after its last attempt. Senders never retry by themselves: the
notifier schedules attempts, so each one is recorded in the outbox. The
senders: ``webhook`` and ``email``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from cronman.outbox.records import EventRecord, Notification


class SendError(Exception):
    """A failed attempt; ``permanent``: another attempt cannot succeed."""

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


class Sender(Protocol):
    """Delivers notifications of one channel kind."""

    kind: str

    async def send(self, note: Notification, events: Sequence[EventRecord]) -> None:
        """Deliver ``note`` (its first events given); raise ``SendError`` on failure."""

    async def close(self) -> None: ...
