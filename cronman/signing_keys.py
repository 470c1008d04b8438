"""Each namespace's signing keys: which generation signs, and which one is retiring.

A namespace's key is derived from the cluster secret and its generation
(:func:`cronman.signing.namespace_key`): nothing secret is stored, only a
small row per namespace that was ever rotated (``KeyState``: its generation
and until when the previous generation still signs). A namespace never
rotated is at generation 0 with no row.

``NamespaceSigners`` is what the senders (the http target, the webhook
notifier) hold: the current states, and a ``Signer`` per namespace made on
first use and kept until its overlap window ends or the states change.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from cronman.signing import Signer, namespace_key

DEFAULT_OVERLAP = 86_400.0  # seconds the previous key keeps signing after a rotation
MAX_OVERLAP = 30 * 86_400.0


@dataclass(frozen=True, slots=True)
class KeyState:
    """A namespace's key generation; ``previous_until``: the previous one signs until then."""

    namespace: str
    generation: int = 0
    previous_until: datetime | None = None
    rotated_at: datetime | None = None

    def overlapping(self, now: float) -> bool:
        until = self.previous_until
        return self.generation > 0 and until is not None and until.timestamp() > now


@dataclass(frozen=True, slots=True)
class NamespaceKey:
    """One key a namespace's receivers should accept."""

    generation: int
    key: str
    signs_until: datetime | None  # None: the current key


def namespace_keys(secret: str, state: KeyState, now: float | None = None
                   ) -> list[NamespaceKey]:
    """The keys that sign for ``state``'s namespace now: current first, then the retiring one."""
    current = time.time() if now is None else now
    keys = [NamespaceKey(state.generation,
                         namespace_key(secret, state.namespace, state.generation), None)]
    if state.overlapping(current):
        keys.append(NamespaceKey(state.generation - 1,
                                 namespace_key(secret, state.namespace, state.generation - 1),
                                 state.previous_until))
    return keys


class NamespaceSigners:
    """The signer of each namespace, for senders (one event loop; no locking needed).

    ``secret`` None: nothing is signed (``signer`` answers None).
    """

    __slots__ = ("_secret", "_states", "_cache")

    def __init__(self, secret: str | None, states: Iterable[KeyState] = ()) -> None:
        self._secret = secret
        self._states: dict[str, KeyState] = {}
        # namespace -> (signer, until when it is right: the overlap's end, or inf)
        self._cache: dict[str, tuple[Signer, float]] = {}
        self.update(states)

    @property
    def enabled(self) -> bool:
        return self._secret is not None

    def update(self, states: Iterable[KeyState]) -> None:
        """Replace the known states (namespaces absent are at generation 0)."""
        fresh = {s.namespace: s for s in states}
        if fresh != self._states:
            self._states = fresh
            self._cache = {}

    def set_state(self, state: KeyState) -> None:
        """Replace one namespace's state (its signer is made again only if it changed)."""
        if self.state(state.namespace) != state:
            self._states[state.namespace] = state
            self._cache.pop(state.namespace, None)

    def state(self, namespace: str) -> KeyState:
        return self._states.get(namespace) or KeyState(namespace)

    def signer(self, namespace: str, now: float) -> Signer | None:
        """The signer for ``namespace`` at ``now`` (two keys inside an overlap window)."""
        cached = self._cache.get(namespace)
        if cached is not None and now < cached[1]:
            return cached[0]
        secret = self._secret
        if secret is None:
            return None
        state = self.state(namespace)
        keys = namespace_keys(secret, state, now)
        until = math.inf
        if len(keys) > 1 and state.previous_until is not None:
            until = state.previous_until.timestamp()
        signer = Signer([k.key for k in keys])
        self._cache[namespace] = (signer, until)
        return signer


def overlap_end(now: datetime, overlap: float) -> datetime:
    """When a rotation made at ``now`` with ``overlap`` seconds retires the previous key."""
    return datetime.fromtimestamp(now.timestamp() + overlap, UTC)
