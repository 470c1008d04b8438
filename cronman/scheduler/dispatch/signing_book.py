"""Keeps the namespaces' signing key generations current on a node.

The http target signs under ``NamespaceSigners``; this reads every
namespace's key state (one small row per namespace ever rotated) at start
and every ``poll_interval`` (the sync poll, 2 s by default). Until a node
has read a rotation it signs with the previous key alone, so a receiver
holding only the new key refuses its callbacks: receivers hold both keys
through the overlap window (the README's "Callback signatures").
"""

from __future__ import annotations

import logging

from cronman.errors import StoreUnavailable
from cronman.scheduler.runtime.lifecycle import Lifecycle, Pool
from cronman.scheduler.runtime.ratelog import RateLimitedLog
from cronman.signing_keys import NamespaceSigners
from cronman.store.base import SigningKeyStore

log = logging.getLogger(__name__)


class SigningKeyBook:
    """Reads the key states into ``signers`` at start and every ``poll_interval``."""

    def __init__(self, store: SigningKeyStore, signers: NamespaceSigners, *, pool: Pool,
                 lifecycle: Lifecycle, poll_interval: float) -> None:
        self._store = store
        self._signers = signers
        self._pool = pool
        self._lifecycle = lifecycle
        self._poll = poll_interval
        self._ratelog = RateLimitedLog(log)

    async def reload(self) -> None:
        self._signers.update(await self._pool(self._store.all_states))

    async def load(self) -> None:
        """The first read; a database that cannot answer now is read again by ``run``."""
        if not self._signers.enabled:
            return
        try:
            await self.reload()
        except StoreUnavailable as exc:
            log.error("cannot read the namespaces' signing keys: %s", exc)

    async def run(self) -> None:
        if not self._signers.enabled:
            return
        while not await self._lifecycle.sleep(self._poll):
            try:
                await self.reload()
                self._ratelog.clear("signing keys")
            except StoreUnavailable as exc:
                self._ratelog.error("signing keys", "cannot read the signing keys: %s", exc)
