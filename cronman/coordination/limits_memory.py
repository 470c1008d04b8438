"""The limits' counters in this process: ``cronman standalone``'s, and the
fair share each node counts on while Redis is away (``LimitCounters``).

The same rules as ``limits.lua``: a sliding log of starts per window, an
optional token bucket, slots leased until released or expired.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from cronman.coordination.limit_counters import (
    GRANTED,
    UNTIL_RELEASED,
    Answer,
    Ask,
    LimitSpec,
)

# Mirrored starts are kept this much longer than their window.
_MIRROR_SLACK_MS = 1000


def _wall_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class _State:
    starts: deque[tuple[int, str]] = field(default_factory=deque)  # (ms, token)
    tokens: float | None = None
    at_ms: int = 0
    slots: dict[str, int] = field(default_factory=dict)  # member -> lease end (ms)


class LocalLimitCounters:
    """Limit counters in memory (thread-safe); ``clock``: Unix ms."""

    shared = False
    retry_ms = 0  # never away

    def __init__(self, clock: Callable[[], int] = _wall_ms) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._states: dict[str, _State] = {}

    def take_now(self, node_id: str, specs: Sequence[LimitSpec], asks: Sequence[Ask], *,
                 lease_ms: int, margin_ms: int) -> list[Answer]:
        """``take``, without the event loop."""
        with self._lock:
            now = self._clock()
            states = [self._prepared(s, now, margin_ms) for s in specs]
            closed: dict[int, Answer] = {}
            out: list[Answer] = []
            for ask in asks:
                member = f"{node_id}|{ask.token}"
                refusal = None
                for k in ask.limits:
                    refusal = closed.get(k) or self._refusal(k, specs[k], states[k], member,
                                                             now, margin_ms)
                    if refusal is not None:
                        closed[k] = refusal
                        break
                if refusal is not None:
                    out.append(refusal)
                    continue
                for k in ask.limits:
                    spec, st = specs[k], states[k]
                    if spec.count:
                        st.starts.append((now, ask.token))
                    if spec.burst and st.tokens is not None:
                        st.tokens -= 1
                    if spec.concurrency:
                        st.slots[member] = now + lease_ms
                out.append(GRANTED)
            return out

    def _prepared(self, spec: LimitSpec, now: int, margin_ms: int) -> _State:
        st = self._states.setdefault(spec.name, _State())
        horizon = now - spec.window_ms - margin_ms
        while st.starts and st.starts[0][0] <= horizon:
            st.starts.popleft()
        if spec.burst:
            tokens = spec.burst if st.tokens is None else st.tokens
            st.tokens = min(float(spec.burst), tokens + (now - st.at_ms) * spec.per_ms)
            st.at_ms = now
        for member in [m for m, end in st.slots.items() if end <= now]:
            del st.slots[member]
        return st

    @staticmethod
    def _refusal(k: int, spec: LimitSpec, st: _State, member: str, now: int,
                 margin_ms: int) -> Answer | None:
        if spec.count and len(st.starts) >= spec.count:
            oldest = st.starts[-spec.count][0]
            return Answer(False, k, len(st.starts),
                          max(1, oldest + spec.window_ms + margin_ms - now + 1))
        if spec.burst and st.tokens is not None and st.tokens < 1:
            return Answer(False, k, spec.burst,
                          max(1, math.ceil((1 - st.tokens) / max(spec.per_ms, 1e-9))))
        if spec.concurrency and member not in st.slots and len(st.slots) >= spec.concurrency:
            return Answer(False, k, len(st.slots), UNTIL_RELEASED)
        return None

    def record(self, node_id: str, specs: Sequence[LimitSpec], ask: Ask, *,
               lease_ms: int) -> None:
        """Count a grant made elsewhere (the shared counters) here too: a node
        mirrors its own starts and slots, so that its fair share, once Redis
        is away, starts from what it has in flight."""
        with self._lock:
            now = self._clock()
            member = f"{node_id}|{ask.token}"
            for k in ask.limits:
                spec = specs[k]
                st = self._states.setdefault(spec.name, _State())
                if spec.count:
                    horizon = now - spec.window_ms - _MIRROR_SLACK_MS
                    while st.starts and st.starts[0][0] <= horizon:
                        st.starts.popleft()
                    st.starts.append((now, ask.token))
                if spec.concurrency:
                    if len(st.slots) > 2 * spec.concurrency:
                        for gone in [m for m, end in st.slots.items() if end <= now]:
                            del st.slots[gone]
                    st.slots[member] = now + lease_ms

    def held(self, node_id: str) -> list[tuple[str, str, str, int]]:
        """What ``node_id`` holds here, to tell the shared counters again
        (after a Redis restart): (``s``, limit, token, ms since the start) per
        start still in a window, (``c``, limit, token, 0) per slot."""
        with self._lock:
            now = self._clock()
            prefix = f"{node_id}|"
            out = []
            for name, st in self._states.items():
                out += [("s", name, token, now - at) for at, token in st.starts]
                out += [("c", name, member[len(prefix):], 0) for member, end in st.slots.items()
                        if end > now and member.startswith(prefix)]
            return out

    def release_now(self, node_id: str, held: Sequence[tuple[str, str]]) -> None:
        with self._lock:
            for name, token in held:
                st = self._states.get(name)
                if st is not None:
                    st.slots.pop(f"{node_id}|{token}", None)

    def renew_now(self, node_id: str, held: Sequence[tuple[str, str]], lease_ms: int) -> None:
        with self._lock:
            end = self._clock() + lease_ms
            for name, token in held:
                st = self._states.get(name)
                member = f"{node_id}|{token}"
                if st is not None and member in st.slots:
                    st.slots[member] = end

    # -- the contract -------------------------------------------------------

    async def take(self, node_id: str, specs: Sequence[LimitSpec], asks: Sequence[Ask], *,
                   lease_ms: int, margin_ms: int, quarantine_ms: int = 0,
                   waiting: Mapping[str, int] | None = None) -> list[Answer]:
        # One process: its one queue per limit keeps the priorities.
        return self.take_now(node_id, specs, asks, lease_ms=lease_ms, margin_ms=margin_ms)

    async def release(self, node_id: str, held: Sequence[tuple[str, str]]) -> None:
        self.release_now(node_id, held)

    async def renew(self, node_id: str, held: Sequence[tuple[str, str]], lease_ms: int
                    ) -> None:
        self.renew_now(node_id, held, lease_ms)

    async def restore(self, node_id: str, held: Sequence[tuple[str, str, str, int]],
                      lease_ms: int) -> None:
        return None  # nothing was lost: these counters never went away

    def usage(self, names: Sequence[str], windows_ms: Sequence[int]) -> list[tuple[int, int]]:
        with self._lock:
            now = self._clock()
            out = []
            for name, window in zip(names, windows_ms, strict=True):
                st = self._states.get(name)
                if st is None:
                    out.append((0, 0))
                    continue
                in_flight = sum(1 for end in st.slots.values() if end > now)
                out.append((in_flight, sum(1 for t, _ in st.starts if t > now - window)))
            return out

    async def aclose(self) -> None:
        return None

    def close(self) -> None:
        return None
